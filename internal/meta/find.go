package meta

// Find: a parallel walk of the namespace over metadata alone, for cairn
// find. Directories are scanned by a pool of workers, each page of
// entries in one view of the store; attributes are read only for the
// entries the caller keeps, in one ordered pass per page.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// FindOptions configures Find. Only Visit is required.
type FindOptions struct {
	// Path is where the walk starts: a path in the volume, from its root
	// ("" or "/": the root). It is resolved without following symlinks;
	// the start itself may be any type. A path that ends with "/" must be
	// a directory.
	Path string
	// Snapshot, if not nil, walks the volume as that snapshot froze it
	// (see View); a snapshot deleted during the walk fails it with
	// base.ErrStale. Nil walks the live volume.
	Snapshot *Snapshot
	// MaxDepth bounds the depth of the entries visited: the start is at
	// depth 0, its entries at 1. Negative: no bound.
	MaxDepth int
	// Workers is how many directories are scanned at once; 0 means
	// twice GOMAXPROCS (a worker waiting for a store on a server leaves
	// its core to another).
	Workers int
	// Attrs makes Find read the attribute of every entry that Filter
	// keeps (FindEntry.Attr); without it only the directory entry is
	// read (name, inode, type).
	Attrs bool
	// Inline makes Find tell, for each regular file Filter keeps, whether
	// its data is kept in the metadata engine (FindEntry.Inline). It
	// implies Attrs.
	Inline bool
	// ChangedSince, if not empty, names a snapshot older than the one
	// walked (or than the live volume): FindEntry.Changed tells the
	// entries that changed since it (see FindEntry). Its cost follows the
	// number of changes (the change log), which are held in memory.
	ChangedSince string
	// Filter, if not nil, is called for each entry of dir (nil for the
	// start) before its attribute is read, with Attr and Inline unset
	// (Changed is set); an entry it refuses is not read further and not
	// visited (a directory refused is still walked). It is called from
	// several goroutines at once.
	Filter func(dir *FindDir, e *FindEntry) bool
	// Visit is called with each page of entries kept, all of one
	// directory (or the start alone, with dir nil), from several
	// goroutines at once. The slice and the entries are only valid
	// during the call. An error stops the walk; Find returns it.
	Visit func(dir *FindDir, ents []FindEntry) error
	// DirDone, if not nil, is called once for each directory walked,
	// after every entry below it was visited and DirDone was called for
	// each of its subdirectories walked (post-order), from several
	// goroutines at once. A directory at MaxDepth is visited, not walked.
	DirDone func(dir *FindDir) error
}

// FindDir is a directory Find walks.
type FindDir struct {
	// Path is the directory's path from the start: "" for the start
	// itself, "a/b" below it.
	Path   string
	Ino    base.Ino
	Depth  int      // of the directory; its entries are one deeper
	Parent *FindDir // nil for the start
	// Count and Bytes belong to the caller, to tally with atomic
	// operations what it found below the directory (cairn find
	// -summary adds them up into the parent from DirDone).
	Count, Bytes atomic.Int64

	pending atomic.Int64 // own scan plus subdirectories not yet done
}

// FindEntry is an entry Find found.
type FindEntry struct {
	// Name is the entry's name in its directory; for the start, its path
	// as given to FindOptions.Path.
	Name  string
	Ino   base.Ino
	Type  base.FileType
	Depth int
	// Attr is the entry's attribute, read if FindOptions.Attrs (else
	// zero; Filter sees it zero too).
	Attr base.Attr
	// Inline (FindOptions.Inline): a regular file that has data and whose
	// every slice holding data is kept in the metadata engine
	// (base.InlineBit).
	Inline bool
	// Changed (FindOptions.ChangedSince): the inode's records
	// (attributes, data, extended attributes, symlink target) differ
	// from the snapshot's, or this name of it is new (created, renamed
	// or linked here) since then.
	Changed bool
}

// RelPath returns the path of an entry of dir from the start ("" for the
// start itself, dir nil).
func (e *FindEntry) RelPath(dir *FindDir) string {
	switch {
	case dir == nil:
		return ""
	case dir.Path == "":
		return e.Name
	}
	return dir.Path + "/" + e.Name
}

// findPage is how many directory entries one view of the store reads.
const findPage = 1024

// findQueueDirs bounds, per worker, the directories waiting to be
// scanned; past it a worker scans the subdirectories it finds itself,
// depth first, so memory stays bounded whatever the tree's shape.
const findQueueDirs = 256

// Find walks the tree under o.Path, calling o.Visit for the start and
// every entry below it that o.Filter keeps, in no particular order
// (entries of one page together). It needs no mount and checks no
// permission. Each page of entries is read in one consistent view; the
// walk as a whole is not one (entries created or removed meanwhile may
// or may not be seen), unless it walks a snapshot. Errors: ErrNotFound
// (no such path or snapshot), ErrNotDir (a path ending in "/" that is not
// a directory), ErrStale (the snapshot was deleted), ErrInvalid (bad
// ChangedSince), the store's errors, and the first error of a callback.
func (m *Meta) Find(ctx context.Context, o FindOptions) error {
	if o.Visit == nil {
		return fmt.Errorf("find: no Visit function: %w", base.ErrInvalid)
	}
	if m.isClosed() {
		return kv.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &finder{m: m, o: &o, ctx: ctx, cancel: cancel, epoch: latestEpoch}
	f.cond = sync.NewCond(&f.mu)
	if o.Inline {
		o.Attrs = true
	}
	if o.Snapshot != nil {
		f.epoch = o.Snapshot.Epoch
	}
	if o.ChangedSince != "" {
		to := ""
		if o.Snapshot != nil {
			to = o.Snapshot.Name
		}
		var err error
		if f.changed, err = m.changedInodes(ctx, o.ChangedSince, to); err != nil {
			return err
		}
	}
	start, err := f.start()
	if err != nil || start == nil {
		return err
	}
	workers := o.Workers
	if workers <= 0 {
		workers = 2 * runtime.GOMAXPROCS(0)
	}
	f.maxQueue = findQueueDirs * workers
	f.stack = append(f.stack, start)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.work()
		}()
	}
	wg.Wait()
	return f.err
}

type finder struct {
	m       *Meta
	o       *FindOptions
	ctx     context.Context
	cancel  context.CancelFunc
	epoch   uint64
	changed map[base.Ino]bool

	mu       sync.Mutex
	cond     *sync.Cond
	stack    []*FindDir // directories waiting for a worker, scanned last in first out
	maxQueue int
	busy     int // workers scanning
	done     bool
	err      error

	pagers sync.Pool // *findPager, reused from directory to directory
}

// start resolves the start, visits it, and returns it as the first
// directory to scan (nil if there is none: not a directory, or MaxDepth 0).
func (f *finder) start() (*FindDir, error) {
	o := f.o
	var ino base.Ino
	var a base.Attr
	err := f.view(func(r kv.Reader) error {
		var err error
		ino, a, err = resolveAt(r, o.Path, f.epoch)
		if err != nil {
			return err
		}
		if a.Type != base.TypeDir && len(o.Path) > 1 && o.Path[len(o.Path)-1] == '/' {
			return fmt.Errorf("%s: %w", o.Path, base.ErrNotDir)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e := FindEntry{Name: o.Path, Ino: ino, Type: a.Type, Changed: f.changed[ino]}
	if e.Name == "" {
		e.Name = "/"
	}
	if o.Filter == nil || o.Filter(nil, &e) {
		if o.Attrs {
			e.Attr = a
		}
		if o.Inline && a.Type == base.TypeFile && a.Length > 0 {
			if err := f.view(func(r kv.Reader) (err error) {
				e.Inline, err = inlineAt(r, ino, f.epoch)
				return err
			}); err != nil {
				return nil, err
			}
		}
		if err := o.Visit(nil, []FindEntry{e}); err != nil {
			return nil, err
		}
	}
	if a.Type != base.TypeDir || o.MaxDepth == 0 {
		return nil, nil
	}
	d := &FindDir{Ino: ino}
	d.pending.Store(1)
	return d, nil
}

// resolveAt finds the inode at path p (from the root, without following
// symlinks) as of epoch.
func resolveAt(r kv.Reader, p string, epoch uint64) (base.Ino, base.Attr, error) {
	ino := base.RootIno
	a, err := getAttrAt(r, ino, epoch)
	if err != nil {
		return 0, base.Attr{}, err
	}
	for _, name := range bytes.Split([]byte(p), []byte("/")) {
		if len(name) == 0 || string(name) == "." {
			continue
		}
		if ino, a, err = lookupAt(r, RootCaller, ino, string(name), epoch); err != nil {
			return 0, base.Attr{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	return ino, a, nil
}

// view runs fn in one view of the store, checking first that the
// snapshot walked still exists.
func (f *finder) view(fn func(r kv.Reader) error) error {
	return f.m.view(f.ctx, func(r kv.Reader) error {
		if s := f.o.Snapshot; s != nil {
			ok, err := frozenAt(r, s.Epoch)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("snapshot %q was deleted: %w", s.Name, base.ErrStale)
			}
		}
		return fn(r)
	})
}

func (f *finder) work() {
	for {
		d := f.next()
		if d == nil {
			return
		}
		if err := f.scan(d); err != nil {
			f.fail(err)
		}
		f.mu.Lock()
		f.busy--
		if len(f.stack) == 0 && f.busy == 0 {
			f.done = true
			f.cond.Broadcast()
		}
		f.mu.Unlock()
	}
}

// next waits for a directory to scan; nil when the walk is over.
func (f *finder) next() *FindDir {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.stack) == 0 && !f.done && f.err == nil {
		f.cond.Wait()
	}
	if f.done || f.err != nil {
		return nil
	}
	d := f.stack[len(f.stack)-1]
	f.stack[len(f.stack)-1] = nil
	f.stack = f.stack[:len(f.stack)-1]
	f.busy++
	return d
}

// push queues d for a worker, unless the queue is full.
func (f *finder) push(d *FindDir) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stack) >= f.maxQueue {
		return false
	}
	f.stack = append(f.stack, d)
	f.cond.Signal()
	return true
}

func (f *finder) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
		f.cancel()
	}
	f.cond.Broadcast()
	f.mu.Unlock()
}

// scan walks directory d page by page, then finishes it.
func (f *finder) scan(d *FindDir) error {
	p, _ := f.pagers.Get().(*findPager)
	if p == nil {
		p = new(findPager)
	}
	defer f.pagers.Put(p)
	after := []byte(nil)
	for {
		if err := f.ctx.Err(); err != nil {
			return err
		}
		more, err := f.page(d, p, after)
		if err != nil {
			return err
		}
		if len(p.kept) > 0 {
			if err := f.o.Visit(d, p.kept); err != nil {
				return err
			}
		}
		if more {
			after = append(after[:0], p.last...)
		}
		subdirs := p.subdirs(d)
		for _, sub := range subdirs {
			d.pending.Add(1)
			if !f.push(sub) {
				if err := f.scan(sub); err != nil {
					return err
				}
			}
		}
		if !more {
			break
		}
	}
	return f.finish(d)
}

// finish marks d's own scan done; once its subdirectories are done too,
// it calls DirDone and finishes its parent's wait for it.
func (f *finder) finish(d *FindDir) error {
	for d != nil && d.pending.Add(-1) == 0 {
		if f.o.DirDone != nil {
			if err := f.o.DirDone(d); err != nil {
				return err
			}
		}
		d = d.Parent
	}
	return nil
}

// findPager holds one page of a directory, reused from page to page.
type findPager struct {
	names []byte      // the page's names, end to end
	ents  []FindEntry // every entry, Name unset until the page is read
	ends  []int       // end of each entry's name in names
	kept  []FindEntry
	order []int // indices into kept, by inode
	last  []byte
	depth int
}

// subdirs returns the directories of the page to walk.
func (p *findPager) subdirs(d *FindDir) []*FindDir {
	var out []*FindDir
	for i := range p.ents {
		e := &p.ents[i]
		if e.Type != base.TypeDir {
			continue
		}
		sub := &FindDir{Path: e.RelPath(d), Ino: e.Ino, Depth: e.Depth, Parent: d}
		sub.pending.Store(1)
		out = append(out, sub)
	}
	return out
}

// page reads, in one view, up to findPage entries of d after the name
// after (nil: from the first), keeps those Filter keeps and reads what
// they need. more reports whether entries may follow (p.last).
func (f *finder) page(d *FindDir, p *findPager, after []byte) (more bool, err error) {
	o := f.o
	depth := d.Depth + 1
	walk := o.MaxDepth < 0 || depth < o.MaxDepth
	err = f.view(func(r kv.Reader) error {
		p.names, p.ends, p.ents, p.kept = p.names[:0], p.ends[:0], p.ents[:0], p.kept[:0]
		var start []byte
		if after != nil {
			start = dentryAfter(d.Ino, string(after))
		}
		var ferr error
		scanned, trashLast := 0, false
		err := vscan(r, dentryPrefix(d.Ino), start, f.epoch, func(k, v []byte) bool {
			scanned++
			trashLast = false
			_, name, err := decodeDentryKey(k)
			if err == nil && d.Ino == base.RootIno && string(name) == TrashName {
				// Hidden as in a listing of the root (readdirAt).
				trashLast = true
				return scanned < findPage
			}
			if err == nil {
				var e FindEntry
				e.Ino, e.Type, err = decodeDentry(v)
				e.Depth = depth
				p.ents = append(p.ents, e)
			}
			if err != nil {
				ferr = fmt.Errorf("directory %d: %w", d.Ino, err)
				return false
			}
			p.names = append(p.names, name...)
			p.ends = append(p.ends, len(p.names))
			return scanned < findPage
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
		more = scanned == findPage
		// One string for the page's names: one allocation, not one each.
		all, from := string(p.names), 0
		for i := range p.ents {
			p.ents[i].Name = all[from:p.ends[i]]
			from = p.ends[i]
		}
		switch {
		case more && trashLast:
			p.last = append(p.last[:0], TrashName...)
		case more:
			p.last = append(p.last[:0], p.ents[len(p.ents)-1].Name...)
		}
		for i := range p.ents {
			e := &p.ents[i]
			if f.changed != nil {
				e.Changed = f.changed[e.Ino]
			}
			if o.Filter == nil || o.Filter(d, e) {
				p.kept = append(p.kept, *e)
			}
		}
		if !walk {
			p.ents = p.ents[:0] // nothing below this depth is walked
		}
		return f.fill(r, p)
	})
	return more, err
}

// fill reads what the kept entries of a page need: attributes and
// whether their data is inline.
func (f *finder) fill(r kv.Reader, p *findPager) error {
	if !f.o.Attrs || len(p.kept) == 0 {
		return nil
	}
	if err := f.attrs(r, p); err != nil {
		return err
	}
	if !f.o.Inline {
		return nil
	}
	for i := range p.kept {
		e := &p.kept[i]
		if e.Type != base.TypeFile || e.Attr.Length == 0 {
			continue
		}
		var err error
		if e.Inline, err = inlineAt(r, e.Ino, f.epoch); err != nil {
			return err
		}
	}
	return nil
}

// attrs reads the attributes of the kept entries. Entries of a directory
// usually have neighbouring inode numbers (made one after another): then
// one scan over their range reads them all, which costs much less than a
// seek each; otherwise they are read by seeks, a batch at a time.
func (f *finder) attrs(r kv.Reader, p *findPager) error {
	p.order = p.order[:0]
	for i := range p.kept {
		p.order = append(p.order, i)
	}
	slices.SortFunc(p.order, func(a, b int) int {
		x, y := p.kept[a].Ino, p.kept[b].Ino
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	lo, hi := p.kept[p.order[0]].Ino, p.kept[p.order[len(p.order)-1]].Ino
	if uint64(hi-lo) <= 4*uint64(len(p.order))+64 {
		return f.attrRange(r, p, lo, hi)
	}
	return f.attrSeeks(r, p)
}

// attrRange reads the kept entries' attributes (p.order sorted, inodes lo
// to hi) with one scan.
func (f *finder) attrRange(r kv.Reader, p *findPager, lo, hi base.Ino) error {
	j := 0
	var ferr error
	err := vscan(r, prefixOnly(pAttr), attrKey(lo), f.epoch, func(k, v []byte) bool {
		ino, err := decodeAttrKey(k)
		if err != nil {
			ferr = err
			return false
		}
		for j < len(p.order) && p.kept[p.order[j]].Ino < ino {
			ferr = fmt.Errorf("entry %q: inode %d: %w", p.kept[p.order[j]].Name, p.kept[p.order[j]].Ino, base.ErrNotFound)
			return false
		}
		if j == len(p.order) || ino > hi {
			return false
		}
		if p.kept[p.order[j]].Ino != ino {
			return true
		}
		a, err := decodeAttr(v)
		if err != nil {
			ferr = fmt.Errorf("inode %d: %w", ino, err)
			return false
		}
		for ; j < len(p.order) && p.kept[p.order[j]].Ino == ino; j++ {
			p.kept[p.order[j]].Attr = a
		}
		return j < len(p.order)
	})
	if err == nil {
		err = ferr
	}
	if err == nil && j < len(p.order) {
		e := &p.kept[p.order[j]]
		err = fmt.Errorf("entry %q: inode %d: %w", e.Name, e.Ino, base.ErrNotFound)
	}
	return err
}

// attrSeeks reads the kept entries' attributes (p.order sorted) by
// seeks, attrBatch at a time (one round trip each on a server).
func (f *finder) attrSeeks(r kv.Reader, p *findPager) error {
	ranges := make([]kv.Range, 0, attrBatch)
	for start := 0; start < len(p.order); start += attrBatch {
		batch := p.order[start:min(start+attrBatch, len(p.order))]
		ranges = ranges[:0]
		for _, i := range batch {
			l := attrKey(p.kept[i].Ino)
			ranges = append(ranges, kv.Range{Start: versionKey(l, f.epoch), End: kv.PrefixEnd(l)})
		}
		ps, err := kv.Firsts(r, ranges)
		if err != nil {
			return err
		}
		for n, i := range batch {
			e := &p.kept[i]
			var v []byte
			ok := false
			if len(ps[n].Key) == attrVersionLen {
				v, ok, err = decodeVersion(attrKey(e.Ino), ps[n].Value)
			}
			if e.Attr, err = inodeAttr(e.Ino, v, ok, err); err != nil {
				return fmt.Errorf("entry %q: %w", e.Name, err)
			}
		}
	}
	return nil
}

// inlineAt reports whether regular file ino has data and every slice of
// it holding data is kept in the metadata engine, as of epoch.
func inlineAt(r kv.Reader, ino base.Ino, epoch uint64) (bool, error) {
	has, all := false, true
	var ferr error
	err := vscan(r, chunkPrefix(ino), nil, epoch, func(k, v []byte) bool {
		ss, err := decodeSlices(v)
		if err != nil {
			ferr = fmt.Errorf("chunk record %x: %w", k, err)
			return false
		}
		for _, s := range ss {
			if s.ID == 0 || s.Len == 0 {
				continue
			}
			has = true
			if s.ID&base.InlineBit == 0 {
				all = false
				return false
			}
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	return has && all, err
}

// changedInodes returns the inodes that changed between snapshot from
// and snapshot to ("" for the live volume), as FindEntry.Changed defines,
// read from the change log in one view.
func (m *Meta) changedInodes(ctx context.Context, from, to string) (map[base.Ino]bool, error) {
	var out map[base.Ino]bool
	err := m.view(ctx, func(r kv.Reader) error {
		d, err := newDiffer(r, from, to)
		if err != nil {
			return err
		}
		if err := d.readLog(); err != nil {
			return err
		}
		out = make(map[base.Ino]bool, len(d.touched)+len(d.added))
		for ino := range d.touched {
			out[ino] = true
		}
		for ino := range d.added {
			out[ino] = true
		}
		return nil
	})
	if errors.Is(err, base.ErrNotFound) {
		return nil, fmt.Errorf("changed since: %w", err)
	}
	return out, err
}
