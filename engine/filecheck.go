package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
)

// bbolt maps a file and reads its pages in place: a page past the end of a
// file that is shorter than its own meta pages say (a backup cut short by a
// full disk or an interrupted copy) faults with SIGBUS, which kills the
// process; no recover catches it. CheckFileSize reads the two meta pages as
// bbolt lays them out (go.etcd.io/bbolt's page and meta structs: a 16-byte
// page header, then magic, version, page size, flags, the root bucket, the
// freelist page, the high-water page id, the transaction id and an FNV-64a
// checksum, in the machine's byte order) and refuses such a file before
// bbolt opens it.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltMetaLen    = 64 // through the checksum
	boltMetaSummed = 56 // the bytes the checksum covers
)

// CheckPages checks the size and the page structure of the bbolt file at
// path, reading it without mapping it (checkPages): nil for a missing or
// empty file, ErrCorrupt naming the file and what it saw for a damaged one.
// A read-write Open of a damaged file would panic inside bbolt, in a
// goroutine of its own, which no caller can recover: Open runs this first,
// and the cluster runs it on raft's log. It reads every reachable page, as
// the freelist rebuild of bbolt's Open does after it.
func CheckPages(path string) (err error) {
	if err := CheckFileSize(path); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && st.Size() == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: a damaged page (%v)", ErrCorrupt, path, r)
		}
	}()
	if err := checkPages(path); err != nil {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// CheckFileSize returns nil for a missing or empty file (bbolt creates or
// initialises it) and for a file whose valid meta pages fit in it; ErrCorrupt
// for a file shorter than one of them says, or with no valid meta page. It
// holds for any bbolt file: the cluster checks raft's log with it too.
func CheckFileSize(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	first, err := readMeta(f, 0)
	if err != nil || first.magic != boltMagic {
		return fmt.Errorf("%w: %s is not a bbolt file (%d bytes)", ErrCorrupt, path, size)
	}
	valid := 0
	for i, off := range []int64{0, int64(first.pageSize)} {
		m, err := readMeta(f, off)
		if err != nil || !m.valid() {
			continue
		}
		valid++
		if need := int64(m.pgid) * int64(m.pageSize); need > size || need < 0 {
			return fmt.Errorf("%w: %s is %d bytes but its meta page %d says %d (%d pages of %d): a truncated copy",
				ErrCorrupt, path, size, i, need, m.pgid, m.pageSize)
		}
	}
	if valid == 0 {
		return fmt.Errorf("%w: %s has no valid bbolt meta page", ErrCorrupt, path)
	}
	return nil
}

type boltMeta struct {
	magic, version, pageSize uint32
	root, freelist           uint64 // the root bucket's page; the freelist's page (all ones: not written)
	pgid                     uint64
	txid                     uint64
	summed                   []byte
	checksum                 uint64
}

func (m boltMeta) valid() bool {
	if m.magic != boltMagic || m.version != boltVersion || m.pageSize < 512 || m.pageSize > 1<<24 {
		return false
	}
	h := fnv.New64a()
	h.Write(m.summed)
	return h.Sum64() == m.checksum
}

// readMeta reads the meta of the page at off.
func readMeta(r io.ReaderAt, off int64) (boltMeta, error) {
	var b [boltPageHeader + boltMetaLen]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return boltMeta{}, err
	}
	m := b[boltPageHeader:]
	le := binary.NativeEndian
	return boltMeta{
		magic:    le.Uint32(m[0:]),
		version:  le.Uint32(m[4:]),
		pageSize: le.Uint32(m[8:]),
		root:     le.Uint64(m[16:]),
		freelist: le.Uint64(m[32:]),
		pgid:     le.Uint64(m[40:]),
		txid:     le.Uint64(m[48:]),
		summed:   append([]byte(nil), m[:boltMetaSummed]...),
		checksum: le.Uint64(m[boltMetaSummed:]),
	}, nil
}
