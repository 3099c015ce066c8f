package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The engine's file is written without fsync. That is safe because it is a
// cache of the Raft log, which is fsynced before any claim is acknowledged:
//
//   - A process crash (SIGKILL, panic, OOM) loses nothing: every commit already
//     reached the kernel's page cache, and bbolt's commit order (pages, then
//     meta) leaves either the old or the new transaction visible.
//   - Only an operating-system crash or power loss can lose or tear unsynced
//     pages. Then the machine's boot id has changed, and the engine file is not
//     trusted: it is set aside, the newest Raft snapshot (itself fsynced by the
//     snapshot store) is restored, and raft replays the log after it.
//
// The marker file records the boot id the engine was last written under and
// whether it was closed cleanly (synced). This turns four fsyncs per batch
// (log and engine, data and meta each) into two.
const markerName = "fsm.boot"

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// engineTrusted reports whether dir's engine file can be used as it is.
func engineTrusted(dir, boot string) bool {
	if _, err := os.Stat(filepath.Join(dir, "fsm.db")); errors.Is(err, os.ErrNotExist) {
		return true // nothing to distrust
	}
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		// No marker: the file was written by a synced engine (or an older
		// version that synced every commit).
		return errors.Is(err, os.ErrNotExist)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return false
	}
	return fields[1] == "clean" || (boot != "" && fields[0] == boot)
}

// writeMarker records the boot id and state ("dirty" while running unsynced,
// "clean" after a synced close), durably.
func writeMarker(dir, boot, state string) error {
	if boot == "" {
		boot = "unknown"
	}
	path := filepath.Join(dir, markerName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("engine marker: %w", err)
	}
	_, err = f.Write([]byte(boot + " " + state + "\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("engine marker: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// setAside moves an untrusted engine file out of the way, keeping it for
// inspection.
func setAside(dir string) error {
	from := filepath.Join(dir, "fsm.db")
	to := filepath.Join(dir, "fsm.db.untrusted")
	os.Remove(to)
	if err := os.Rename(from, to); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set aside untrusted engine file: %w", err)
	}
	return nil
}

var _ = bytes.Equal
