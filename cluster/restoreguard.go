package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"oncehook/engine"
)

// hashicorp/raft's Restore makes the leader take the backup's state at once,
// as a snapshot at an index past its log, and only then sends it to the
// followers. Until a majority has installed it, the restore is not
// committed, yet the leader's snapshot and engine already hold it. Should
// the leader stop in that window (killed, its machine lost) or lose its
// leadership, the others elect a leader without the restore and write
// their own entries at that index, while the old leader keeps the
// uncommitted state and skips those entries as applied: two histories
// behind equal indexes, replicas that never converge, and an event
// acknowledged and delivered before the backup claimed again on the old
// leader (a duplicate answered 202 and delivered twice).
//
// So the leader writes restorePending before it calls Restore and removes
// it only once a barrier after the restore has committed (the followers
// cannot acknowledge an entry after the snapshot's index without having
// installed it). A restore that is not confirmed stops this node (n.fatal):
// its state may be a history the cluster does not share. A node that finds
// the marker at start does not trust its own state: it sets its engine
// file and raft directory aside and rejoins the cluster as a new node,
// taking whatever the cluster committed, the restore or not. A cluster of
// one voter needs none of this: its restore commits as it is taken.
const restorePending = "restore.pending"

// ErrRestoreUnconfirmed: a restore was taken by this leader but not
// confirmed by a majority; the node stops and rejoins from the others.
var ErrRestoreUnconfirmed = errors.New("restore not confirmed by a majority")

// ErrRestoreNotBegun: raft refused a restore before this leader took
// anything (a leadership transfer under way, leadership lost, a membership
// change not committed yet): the state is as it was; try again.
var ErrRestoreNotBegun = errors.New("restore not begun, nothing changed (try again)")

// beginRestore writes the marker, synced; done removes it.
func (n *Node) beginRestore() (done func() error, err error) {
	path := filepath.Join(n.cfg.Dir, restorePending)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("restore marker: %w", err)
	}
	_, err = fmt.Fprintf(f, "restore begun %s at log index %d\n", time.Now().UTC().Format(time.RFC3339), n.raft.LastIndex())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = engine.SyncDir(n.cfg.Dir)
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("restore marker: %w", err)
	}
	return func() error {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("restore marker: %w", err)
		}
		return engine.SyncDir(n.cfg.Dir)
	}, nil
}

// abandonUnconfirmedRestore runs at start, before the engine and the log
// are opened: with the marker present, this node's state is set aside in
// restore-aborted-TIME/ (kept for inspection) and the node starts empty, to
// rejoin the cluster.
func abandonUnconfirmedRestore(dir string, log interface {
	Error(msg string, args ...any)
}) error {
	marker := filepath.Join(dir, restorePending)
	note, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore marker: %w", err)
	}
	aside := filepath.Join(dir, "restore-aborted-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(aside, 0o700); err != nil {
		return fmt.Errorf("set aside after an unconfirmed restore: %w", err)
	}
	for _, name := range []string{"fsm.db", "fsm.db.untrusted", "raft", markerName} {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set aside after an unconfirmed restore: %w", err)
		}
	}
	if err := os.Rename(marker, filepath.Join(aside, restorePending)); err != nil {
		return fmt.Errorf("set aside after an unconfirmed restore: %w", err)
	}
	if err := engine.SyncDir(dir); err != nil {
		return err
	}
	log.Error("this node led a restore that the cluster did not confirm before it stopped (the marker says: "+
		strings.TrimSpace(string(note))+"); its state is set aside and it rejoins the cluster, taking what the cluster committed",
		"set_aside", aside)
	return nil
}

// confirmRestore waits for a barrier after the restore: committed, a
// majority has installed the restored snapshot.
func (n *Node) confirmRestore(timeout time.Duration) error {
	if err := n.raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("%w: %v", ErrRestoreUnconfirmed, translateApplyErr(err))
	}
	return nil
}

// restoreUnconfirmed stops the node after a restore the cluster did not
// confirm, a second later, so that the operator's request gets its answer
// first (the process exits on fatal).
func (n *Node) restoreUnconfirmed(err error) {
	time.AfterFunc(time.Second, func() {
		n.fatal(fmt.Errorf("%w; stopping: at the next start this node sets its state aside and rejoins the cluster", err))
	})
}
