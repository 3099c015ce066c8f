package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// checkPages checks the page structure of the bbolt file at path before
// bbolt is trusted with it: an operator's backup may be damaged, and bbolt
// reads pages in place, trusting every id and offset they hold. A child id
// past the file makes it read unmapped memory (a fault), a malformed page
// makes it panic, and the freelist rebuild a read-write Open does (every
// reachable page, walked in a goroutine of bbolt's own) panics the process
// on the first disorder it meets. So the file is read here with ReadAt,
// every offset checked, from the meta page bbolt would use: each page
// reachable from the root bucket is in bounds (below the high-water mark,
// overflow included), carries its own id, is a branch or a leaf, and is
// reached once; every element lies inside its page; keys ascend strictly
// within a page and stay inside the range their parent gives them; a
// bucket's root is a page or a well-formed inline page; a written
// freelist lists only pages in bounds that nothing reaches. What bbolt's
// Tx.Check verifies, with errors instead of panics. It cannot tell a changed
// value from a true one: bbolt keeps no checksums of data pages.
func checkPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var m boltMeta
	for _, off := range []int64{0, -1} {
		if off < 0 {
			off = int64(m.pageSize)
			if m.pageSize == 0 {
				first, err := readMeta(f, 0)
				if err != nil {
					return fmt.Errorf("%w: %v", ErrCorrupt, err)
				}
				off = int64(first.pageSize)
			}
		}
		cand, err := readMeta(f, off)
		if err == nil && cand.valid() && (m.magic == 0 || cand.txid > m.txid) {
			m = cand
		}
	}
	if m.magic == 0 {
		return fmt.Errorf("%w: no valid meta page", ErrCorrupt)
	}
	w := pageWalker{r: f, pageSize: uint64(m.pageSize), hwm: m.pgid, seen: make(map[uint64]bool),
		maxNodes: m.pgid*uint64(m.pageSize)/elemSize + 16}
	root, err := w.page(m.root)
	if err != nil {
		return fmt.Errorf("root bucket: %w", err)
	}
	if err := w.node(m.root, root, nil, nil, 0); err != nil {
		return err
	}
	if m.freelist != ^uint64(0) {
		return w.freelist(m.freelist)
	}
	return nil
}

const (
	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageFreelist = 0x10
	leafBucket   = 0x01 // a leaf element that is a nested bucket
	elemSize     = 16   // a branch or leaf page element
	inBucketSize = 16   // a bucket's value: root page id, sequence
	maxDepth     = 64
)

type pageWalker struct {
	r        io.ReaderAt
	pageSize uint64
	hwm      uint64
	seen     map[uint64]bool
	// nodes counts the pages and inline pages checked: inline buckets are
	// bytes inside a value, not pages marked seen, and damaged ones can
	// nest into each other many times over; a true file has no more of
	// them than element slots.
	nodes, maxNodes uint64
}

func corruptPage(id uint64, format string, a ...any) error {
	return fmt.Errorf("%w: page %d: %s", ErrCorrupt, id, fmt.Sprintf(format, a...))
}

// page reads page id and its overflow, once.
func (w *pageWalker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, corruptPage(id, "out of bounds [2, %d)", w.hwm)
	}
	var hdr [boltPageHeader]byte
	if _, err := w.r.ReadAt(hdr[:], int64(id*w.pageSize)); err != nil {
		return nil, corruptPage(id, "read: %v", err)
	}
	le := binary.NativeEndian
	if got := le.Uint64(hdr[0:]); got != id {
		return nil, corruptPage(id, "holds id %d", got)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= w.hwm {
		return nil, corruptPage(id, "overflow %d past the high-water mark %d", overflow, w.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, corruptPage(i, "reached twice")
		}
		w.seen[i] = true
	}
	buf := make([]byte, (overflow+1)*w.pageSize)
	if _, err := w.r.ReadAt(buf, int64(id*w.pageSize)); err != nil {
		return nil, corruptPage(id, "read: %v", err)
	}
	return buf, nil
}

// node checks page p (id for messages; 0 for an inline page) whose keys
// must lie in [lo, hi) (nil: unbounded), and what it leads to.
func (w *pageWalker) node(id uint64, p []byte, lo, hi []byte, depth int) error {
	if depth > maxDepth {
		return corruptPage(id, "nested deeper than %d", maxDepth)
	}
	if w.nodes++; w.nodes > w.maxNodes {
		return corruptPage(id, "more pages and inline buckets than the file has room for")
	}
	if len(p) < boltPageHeader {
		return corruptPage(id, "shorter than a page header")
	}
	le := binary.NativeEndian
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if boltPageHeader+count*elemSize > len(p) {
		return corruptPage(id, "%d elements do not fit", count)
	}
	// elem returns element i's key and (leaf) value, bounds checked.
	elem := func(i int) (eflags uint32, key, value []byte, child uint64, err error) {
		at := boltPageHeader + i*elemSize
		e := p[at : at+elemSize]
		var pos, ksize, vsize uint64
		if flags == pageBranch {
			pos, ksize, child = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
		} else {
			eflags, pos, ksize, vsize = le.Uint32(e[0:]), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		}
		start := uint64(at) + pos
		if start+ksize+vsize > uint64(len(p)) {
			return 0, nil, nil, 0, corruptPage(id, "element %d runs past the page", i)
		}
		return eflags, p[start : start+ksize], p[start+ksize : start+ksize+vsize], child, nil
	}
	var prev []byte
	keyInRange := func(i int, key []byte) error {
		switch {
		case i > 0 && bytes.Compare(key, prev) <= 0:
			return corruptPage(id, "key %d out of order", i)
		case lo != nil && bytes.Compare(key, lo) < 0, hi != nil && bytes.Compare(key, hi) >= 0:
			return corruptPage(id, "key %d outside its parent's range", i)
		}
		prev = key
		return nil
	}
	switch flags {
	case pageBranch:
		if count == 0 || id == 0 {
			return corruptPage(id, "an empty or inline branch")
		}
		for i := range count {
			_, key, _, child, err := elem(i)
			if err != nil {
				return err
			}
			if err := keyInRange(i, key); err != nil {
				return err
			}
			next := hi
			if i+1 < count {
				_, nk, _, _, err := elem(i + 1)
				if err != nil {
					return err
				}
				next = nk
			}
			cp, err := w.page(child)
			if err != nil {
				return err
			}
			if err := w.node(child, cp, key, next, depth+1); err != nil {
				return err
			}
		}
	case pageLeaf:
		for i := range count {
			eflags, key, value, _, err := elem(i)
			if err != nil {
				return err
			}
			if err := keyInRange(i, key); err != nil {
				return err
			}
			if eflags&leafBucket == 0 {
				continue
			}
			if len(value) < inBucketSize {
				return corruptPage(id, "bucket %d has a value of %d bytes", i, len(value))
			}
			if root := le.Uint64(value); root != 0 {
				rp, err := w.page(root)
				if err != nil {
					return err
				}
				if err := w.node(root, rp, nil, nil, depth+1); err != nil {
					return err
				}
			} else if inline := value[inBucketSize:]; len(inline) > 0 {
				if len(inline) < boltPageHeader || le.Uint16(inline[8:]) != pageLeaf {
					return corruptPage(id, "bucket %d: a malformed inline page", i)
				}
				if err := w.node(0, inline, nil, nil, depth+1); err != nil {
					return err
				}
			}
		}
	default:
		return corruptPage(id, "type %#x where a branch or leaf belongs", flags)
	}
	return nil
}

// freelist checks a written freelist: in bounds, and listing only pages
// in bounds that nothing reaches, each once.
func (w *pageWalker) freelist(id uint64) error {
	p, err := w.page(id)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	le := binary.NativeEndian
	if le.Uint16(p[8:]) != pageFreelist {
		return corruptPage(id, "the freelist page is not one")
	}
	count, at := uint64(le.Uint16(p[10:])), uint64(boltPageHeader)
	if count == 0xFFFF { // the count is in the first element
		if len(p) < boltPageHeader+8 {
			return corruptPage(id, "a freelist too short for its count")
		}
		count, at = le.Uint64(p[boltPageHeader:]), boltPageHeader+8
	}
	if count > (uint64(len(p))-at)/8 {
		return corruptPage(id, "%d free ids do not fit", count)
	}
	free := make(map[uint64]bool, count)
	for i := range count {
		f := le.Uint64(p[at+8*i:])
		if f < 2 || f >= w.hwm || w.seen[f] || free[f] {
			return corruptPage(id, "free id %d is out of bounds, in use or listed twice", f)
		}
		free[f] = true
	}
	return nil
}
