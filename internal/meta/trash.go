package meta

// The trash (docs/design/0007-trash.md). While Settings.TrashDays > 0, a
// name that unlink, rmdir or a replacing rename removes is not destroyed
// with its inode: the inode keeps its records and gets an entry in an hour
// bucket of the root's directory .trash instead,
//
//	/.trash/<UTC hour, 2006-01-02-15>/<parent ino>-<ino>-<name>
//
// so that it can be put back where it was, and is destroyed when its
// bucket is purged. A removed tree (rm -rf) arrives one inode at a time,
// children before their directory (a directory is removed empty), each
// entry naming its original directory by inode: restoring the entries in
// order of their original paths rebuilds the tree, with the same inodes,
// attributes, slices, symlink targets and hard links (every removed link of
// a file is an entry of its own).
//
// Every directory of the trash (the trash, its buckets, the directories
// moved there) carries base.AttrFlagTrash: nothing is created in, removed
// from or renamed out of one, and none is removed or renamed, but by
// restore and purge here. The name .trash in the root is reserved, hidden
// from the root's listing, and the trash and its buckets belong to root
// (mode 0700).
//
// Two functions are the only ways in and out of the trash alive: toTrash
// and fromTrash. Accounting that follows a name (directory quotas) hooks
// there; purge destroys through dropLink and destroy like any removal.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// TrashName is the name of the trash directory in the root.
const TrashName = ".trash"

// TrashBucketLayout is the time layout (UTC) of the trash's hour buckets.
const TrashBucketLayout = "2006-01-02-15"

// MaxTrashDays bounds Settings.TrashDays.
const MaxTrashDays = 36500

// errTrashInos: a move into the trash must make the trash or a bucket and
// this client had no inode number set aside for it (inode numbers are
// allocated outside transactions). The mutation gets them and runs again
// (trashRetry).
var errTrashInos = errors.New("meta: the trash needs new inode numbers")

// isTrashDir reports whether a is a directory of the trash.
func isTrashDir(a *base.Attr) bool { return a.Flags&base.AttrFlagTrash != 0 }

// trashReserved reports whether name in parent is the trash's own name.
func trashReserved(parent base.Ino, name string) bool {
	return parent == base.RootIno && name == TrashName
}

// errInTrash is the refusal of a change inside the trash.
func errInTrash(verb string) error {
	return fmt.Errorf("%s: the trash (/%s) is read-only; use cairn trash restore or purge: %w", verb, TrashName, base.ErrPermission)
}

// trashEntryName is the name of the trash entry of name in parent, inode
// ino.
func trashEntryName(parent, ino base.Ino, name string) string {
	return strconv.FormatUint(uint64(parent), 10) + "-" + strconv.FormatUint(uint64(ino), 10) + "-" + name
}

// parseTrashEntry splits a trash entry name into the original directory,
// the inode and the original name.
func parseTrashEntry(entry string) (parent, ino base.Ino, name string, ok bool) {
	p, rest, ok1 := strings.Cut(entry, "-")
	i, n, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || n == "" {
		return 0, 0, "", false
	}
	pn, err1 := strconv.ParseUint(p, 10, 64)
	in, err2 := strconv.ParseUint(i, 10, 64)
	if err1 != nil || err2 != nil || pn == 0 || in == 0 {
		return 0, 0, "", false
	}
	return base.Ino(pn), base.Ino(in), n, true
}

// trashState is this client's memory of the trash: inode numbers set aside
// for its directories, and the bucket it last used (a guess that lets a
// move read every record it needs in one round trip).
type trashState struct {
	inos   []base.Ino
	trash  base.Ino
	bucket string
	bino   base.Ino
	// seen: bino was read as committed (not only made by a transaction
	// that may yet fail), so it stays for its hour and the next (a purge
	// keeps it: bucketKeep) and a move needs no read to find it.
	seen bool
}

// trashRetry runs a mutation that may move something into the trash; if
// the move needed inode numbers this client had not set aside, it sets
// two more aside and runs the mutation again. Concurrent removals of
// this client share the numbers set aside, so one may find them taken
// again; but each failure adds two, and once one of them has made the
// bucket the others need none.
func (m *Meta) trashRetry(ctx context.Context, run func() error) error {
	err := run()
	for i := 0; i < 100 && errors.Is(err, errTrashInos); i++ {
		if perr := m.reserveTrashInos(ctx); perr != nil {
			return perr
		}
		err = run()
	}
	return err
}

// reserveTrashInos sets two more inode numbers aside for the trash's
// directories (the trash and a bucket).
func (m *Meta) reserveTrashInos(ctx context.Context) error {
	for range 2 {
		ino, err := m.allocIno(ctx)
		if err != nil {
			return err
		}
		m.trashMu.Lock()
		m.trash.inos = append(m.trash.inos, ino)
		m.trashMu.Unlock()
	}
	return nil
}

// takeTrashIno takes an inode number set aside (an attempt that does not
// commit loses it: inode numbers are never reused, gaps are harmless).
func (o *op) takeTrashIno() (base.Ino, error) {
	m := o.m
	m.trashMu.Lock()
	defer m.trashMu.Unlock()
	if len(m.trash.inos) == 0 {
		return 0, errTrashInos
	}
	ino := m.trash.inos[0]
	m.trash.inos = m.trash.inos[1:]
	return ino, nil
}

// trashOn reports whether removals go to the trash.
func (o *op) trashOn() bool { return o.m.Settings().TrashDays > 0 }

// trashDir returns the trash directory, making it if mk is set; 0 if there
// is none (or the root's .trash is a directory made before the trash
// existed, which is left alone).
func (o *op) trashDir(mk bool) (base.Ino, *base.Attr, error) {
	t, typ, ok, err := getDentry(o, base.RootIno, TrashName)
	if err != nil {
		return 0, nil, err
	}
	if !ok {
		if !mk {
			return 0, nil, nil
		}
		root, err := o.dirAttr(base.RootIno)
		if err != nil {
			return 0, nil, err
		}
		if t, err = o.takeTrashIno(); err != nil {
			return 0, nil, err
		}
		ta := o.newTrashAttr(base.RootIno)
		if err := o.addTrashDir(t, ta, base.RootIno, root, TrashName); err != nil {
			return 0, nil, err
		}
		return t, ta, nil
	}
	if typ != base.TypeDir {
		return 0, nil, nil
	}
	ta, err := o.attr(t)
	if err != nil {
		return 0, nil, err
	}
	if !isTrashDir(ta) {
		return 0, nil, nil
	}
	return t, ta, nil
}

func (o *op) newTrashAttr(parent base.Ino) *base.Attr {
	return &base.Attr{Type: base.TypeDir, Mode: 0o700, Nlink: 2, Parent: parent, Flags: base.AttrFlagTrash,
		Atime: o.now, Mtime: o.now, Ctime: o.now, Btime: o.now}
}

// addTrashDir makes directory ino (the trash or a bucket) named name in
// parent. It is counted as an inode of the volume, but even past the
// inode limit: a removal must not fail for want of room.
func (o *op) addTrashDir(ino base.Ino, a *base.Attr, parent base.Ino, p *base.Attr, name string) error {
	o.remember(attrKey(ino), topVersion{}) // a fresh inode has no versions
	if err := o.addUsage(counterUsedInodes, 1); err != nil {
		return err
	}
	// Counted by the quotas of its place (the root's, if it has one),
	// past their limits as past the volume's.
	a.Quota = p.Quota
	if err := o.countQuota(a.Quota, [2]int64{0, 1}); err != nil {
		return err
	}
	if err := o.vset(dentryKey(parent, name), encodeDentry(ino, base.TypeDir)); err != nil {
		return err
	}
	p.Nlink++
	o.touchDir(parent, p)
	o.put(ino, a)
	return nil
}

// bucketKeep is how long after its hour began an empty bucket stays: its
// hour and the next, so that a client whose clock is behind still finds
// it.
const bucketKeep = 2 * time.Hour

// trashBucket returns the bucket of the current hour, making it (and the
// trash) if needed; 0 if the volume has no usable trash.
func (o *op) trashBucket() (base.Ino, error) {
	name := time.Unix(0, o.now).UTC().Format(TrashBucketLayout)
	o.m.trashMu.Lock()
	hint := o.m.trash
	o.m.trashMu.Unlock()
	if hint.bino != 0 && hint.bucket == name {
		// This client found or made the bucket of this hour. A purge
		// never removes a bucket of the last two hours (purgeBucket), so
		// it is still there, unless the transaction that made it failed:
		// its attribute says, read once.
		if hint.seen {
			return hint.bino, nil
		}
		switch _, err := o.dirAttr(hint.bino); {
		case err == nil:
			// In a group commit (a kv.Sub of the group's transaction) the
			// attribute read may be another member's write, which is not
			// committed: if the group then ran again or failed, a seen
			// bucket that was never made would take the entries of every
			// later removal (a CI run caught one on Pebble). Only a read
			// of committed state, or of this transaction's own write,
			// marks it seen.
			if _, grouped := o.wtx.Txn.(*kv.Sub); !grouped {
				o.m.trashMu.Lock()
				if o.m.trash.bino == hint.bino {
					o.m.trash.seen = true
				}
				o.m.trashMu.Unlock()
			}
			return hint.bino, nil
		case !errors.Is(err, base.ErrNotFound):
			return 0, err
		}
	}
	keys := [][]byte{dentryKey(base.RootIno, TrashName), attrKey(base.RootIno)}
	if hint.trash != 0 {
		keys = append(keys, attrKey(hint.trash), dentryKey(hint.trash, name))
	}
	if err := o.prefetchOp(keys...); err != nil {
		return 0, err
	}
	t, ta, err := o.trashDir(true)
	if err != nil || t == 0 {
		return 0, err
	}
	b, typ, ok, err := getDentry(o, t, name)
	if err != nil {
		return 0, err
	}
	if ok && typ != base.TypeDir {
		return 0, fmt.Errorf("trash bucket %s is not a directory: %w", name, base.ErrIO)
	}
	if !ok {
		if b, err = o.takeTrashIno(); err != nil {
			return 0, err
		}
		if err := o.addTrashDir(b, o.newTrashAttr(t), t, ta, name); err != nil {
			return 0, err
		}
	}
	o.m.trashMu.Lock()
	o.m.trash.trash, o.m.trash.bucket, o.m.trash.bino, o.m.trash.seen = t, name, b, ok
	o.m.trashMu.Unlock()
	return b, nil
}

// toTrash is the one place a removed name enters the trash: ino
// (attributes a), whose entry name in directory parent this operation has
// just removed or replaced, gets an entry in the current hour's bucket
// instead of losing a link. For a directory (always empty: rmdir, or
// replaced by a rename), the caller has already dropped parent's link
// count. It returns false, having changed nothing, when the trash is off
// or the volume has no usable trash: the caller then drops the link or
// destroys the inode as before. The inode's usage stays counted in the
// volume; accounting that follows the name (a directory quota of parent's
// tree) must move it to the trash here.
func (o *op) toTrash(parent base.Ino, name string, ino base.Ino, a *base.Attr) (bool, error) {
	if !o.trashOn() {
		return false, nil
	}
	b, err := o.trashBucket()
	if err != nil || b == 0 {
		return false, err
	}
	entry := trashEntryName(parent, ino, name)
	if a.Flags&base.AttrFlagTrashed != 0 {
		// A link of this inode went to the trash before: this one may
		// have been removed once already this hour (made again, removed
		// again); then the entry there keeps the inode.
		if old, _, ok, err := getDentry(o, b, entry); err != nil {
			return false, err
		} else if ok && old == ino {
			return false, nil
		}
	} else {
		// No entry was ever made for this inode (entries name it): the
		// new one has no versions, nothing to read.
		o.remember(dentryKey(b, entry), topVersion{})
	}
	if a.Type != base.TypeDir { // a directory has one link: no name of it can come back while it is in the trash
		a.Flags |= base.AttrFlagTrashed
	}
	if err := o.trashQuota(ino, a, b); err != nil {
		return false, err
	}
	if err := o.vset(dentryKey(b, entry), encodeDentry(ino, a.Type)); err != nil {
		return false, err
	}
	a.Ctime = o.now
	a.Parent = b
	if a.Type == base.TypeDir {
		a.Flags |= base.AttrFlagTrash
		// A directory's link to its bucket is counted there; a file's
		// entry leaves the bucket's attributes alone, so that removals
		// in different directories do not all write one record.
		ba, err := o.dirAttr(b)
		if err != nil {
			return false, err
		}
		ba.Nlink++
		o.touchDir(b, ba)
	}
	o.put(ino, a)
	return true, nil
}

// trashQuota hands inode ino (attributes a), going into bucket b, from
// the directory quotas of its place to those of the trash (none, unless
// the root has one): what the trash holds is not charged to the tree it
// was removed from. A file with other links (live or in the trash) stays
// counted by its quota until purged or restored: an inode counts in one
// quota, and its other links may be live there.
func (o *op) trashQuota(ino base.Ino, a *base.Attr, b base.Ino) error {
	if a.Quota == 0 || (a.Type != base.TypeDir && a.Nlink > 1) {
		return nil // no quota counts it (so none counts the trash either), or it stays
	}
	ba, err := o.dirAttr(b)
	if err != nil {
		return err
	}
	return o.moveQuota(ino, a, ba.Quota)
}

// fromTrash is the one place an inode leaves the trash alive: the entry
// entry of bucket b (directory attributes ba), for inode ino, becomes name
// in directory parent again. Errors: ErrNotFound (parent is gone, or is
// in the trash itself: restore it first), ErrExist (name is taken).
// Accounting that follows the name (a directory quota of parent's tree)
// must take the inode back here.
func (o *op) fromTrash(b base.Ino, ba *base.Attr, entry string, ino base.Ino, parent base.Ino, name string) error {
	if trashReserved(parent, name) {
		return errInTrash("restore")
	}
	p, err := o.dirAttr(parent)
	if err != nil {
		return fmt.Errorf("restore %s: its directory (inode %d) is gone: %w", entry, parent, base.ErrNotFound)
	}
	if isTrashDir(p) {
		return fmt.Errorf("restore %s: its directory (inode %d) is in the trash itself; restore that first: %w", entry, parent, base.ErrNotFound)
	}
	if _, _, ok, err := getDentry(o, parent, name); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("restore %s: %q exists in directory %d: %w", entry, name, parent, base.ErrExist)
	}
	a, err := o.attr(ino)
	if err != nil {
		return err
	}
	if a.Type == base.TypeDir && p.Nlink >= MaxLinks {
		return fmt.Errorf("directory %d: %w", parent, base.ErrTooManyLinks)
	}
	// Back under parent's quotas, within their limits (ErrQuota: the
	// entry stays in the trash). A file with other links stays counted
	// where it was (see trashQuota).
	if a.Type == base.TypeDir || a.Nlink <= 1 {
		if err := o.moveQuota(ino, a, p.Quota); err != nil {
			return err
		}
	}
	if err := o.vdel(dentryKey(b, entry)); err != nil {
		return err
	}
	if err := o.vset(dentryKey(parent, name), encodeDentry(ino, a.Type)); err != nil {
		return err
	}
	a.Parent = parent
	a.Ctime = o.now
	if a.Type == base.TypeDir {
		a.Flags &^= base.AttrFlagTrash
		ba.Nlink--
		o.touchDir(b, ba)
		p.Nlink++
	}
	o.put(ino, a)
	o.touchDir(parent, p)
	return nil
}

// TrashEntry is one entry of the trash.
type TrashEntry struct {
	Bucket   string        `json:"bucket"` // the hour bucket, TrashBucketLayout
	Name     string        `json:"name"`   // the entry's name in the bucket
	Ino      base.Ino      `json:"ino"`
	Parent   base.Ino      `json:"parent"`    // the original directory
	Orig     string        `json:"orig_name"` // the original name
	Type     base.FileType `json:"-"`
	TypeName string        `json:"type"`
	Length   uint64        `json:"length"`
	Nlink    uint32        `json:"nlink"`
	// Path is the original path: the original directory's path (through
	// the trash's entries of directories removed too), then the name; a
	// directory that is gone shows as "<inode N>".
	Path string `json:"path"`
	// Removed is when it went to the trash (its ctime then).
	Removed time.Time `json:"removed"`
}

// ListTrash lists the trash, oldest bucket first, each bucket's entries in
// name order, with their original paths.
func (m *Meta) ListTrash(ctx context.Context) ([]TrashEntry, error) {
	return m.listTrash(ctx, true)
}

// listTrash is ListTrash; without paths, Path is left empty.
func (m *Meta) listTrash(ctx context.Context, paths bool) ([]TrashEntry, error) {
	var out []TrashEntry
	err := m.view(ctx, func(r kv.Reader) error {
		out = nil
		t, _, ok, err := getDentry(r, base.RootIno, TrashName)
		if err != nil || !ok {
			return err
		}
		if ta, err := getAttr(r, t); err != nil || !isTrashDir(&ta) {
			return err
		}
		buckets, err := readdirAt(r, RootCaller, t, "", 0, false, latestEpoch)
		if err != nil {
			return err
		}
		dirs := map[base.Ino]*TrashEntry{}
		for _, bk := range buckets {
			ents, err := readdirAt(r, RootCaller, bk.Ino, "", 0, true, latestEpoch)
			if err != nil {
				return err
			}
			for _, e := range ents {
				te := TrashEntry{Bucket: bk.Name, Name: e.Name, Ino: e.Ino, Type: e.Type, TypeName: e.Type.String(),
					Length: e.Attr.Length, Nlink: e.Attr.Nlink, Removed: base.NsToTime(e.Attr.Ctime)}
				var ok bool
				if te.Parent, _, te.Orig, ok = parseTrashEntry(e.Name); !ok {
					te.Orig = e.Name
				}
				out = append(out, te)
			}
		}
		if !paths {
			return nil
		}
		for i := range out {
			if out[i].Type == base.TypeDir {
				dirs[out[i].Ino] = &out[i]
			}
		}
		n := newNamer(r, latestEpoch)
		var dirPath func(ino base.Ino, depth int) string
		dirPath = func(ino base.Ino, depth int) string {
			if e, ok := dirs[ino]; ok && depth < 4096 {
				return path.Join(dirPath(e.Parent, depth+1), e.Orig)
			}
			if p, err := n.dirPath(ino); err == nil && !strings.HasPrefix(p, "/"+TrashName+"/") {
				return p
			}
			return fmt.Sprintf("<inode %d>", ino)
		}
		for i := range out {
			out[i].Path = path.Join(dirPath(out[i].Parent, 0), out[i].Orig)
		}
		return nil
	})
	return out, err
}

// TrashUsage is what the trash holds.
type TrashUsage struct {
	Entries int    `json:"entries"`
	Inodes  uint64 `json:"inodes"` // distinct inodes of the entries
	Bytes   uint64 `json:"bytes"`  // their length, as Usage counts it
	Buckets int    `json:"buckets"`
	// Oldest is the oldest bucket ("" if none).
	Oldest string `json:"oldest,omitempty"`
}

// TrashUsage sums the trash (a walk of its entries).
func (m *Meta) TrashUsage(ctx context.Context) (TrashUsage, error) {
	ents, err := m.listTrash(ctx, false)
	if err != nil {
		return TrashUsage{}, err
	}
	var u TrashUsage
	seen := map[base.Ino]bool{}
	buckets := map[string]bool{}
	for _, e := range ents {
		u.Entries++
		buckets[e.Bucket] = true
		if u.Oldest == "" || e.Bucket < u.Oldest {
			u.Oldest = e.Bucket
		}
		if seen[e.Ino] {
			continue
		}
		seen[e.Ino] = true
		u.Inodes++
		if e.Type == base.TypeFile {
			u.Bytes += e.Length
		}
	}
	u.Buckets = len(buckets)
	return u, nil
}

// RestoreTrash puts the trash entry entry of bucket back where it was
// removed from, and returns that directory and name. Errors: ErrNotFound
// (no such entry; or its directory is gone, or still in the trash),
// ErrExist (the name is taken again), ErrInvalid (not a trash entry name).
func (m *Meta) RestoreTrash(ctx context.Context, bucket, entry string) (base.Ino, string, error) {
	parent, ino, name, ok := parseTrashEntry(entry)
	if !ok {
		return 0, "", fmt.Errorf("%q is not a trash entry (want PARENT-INODE-NAME): %w", entry, base.ErrInvalid)
	}
	if m.opts.ReadOnly {
		return 0, "", base.ErrReadOnly
	}
	err := m.mutate(ctx, func(o *op) error {
		b, ba, err := o.trashBucketNamed(bucket)
		if err != nil {
			return err
		}
		got, _, ok, err := getDentry(o, b, entry)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("trash entry %s/%s: %w", bucket, entry, base.ErrNotFound)
		}
		if got != ino {
			return fmt.Errorf("trash entry %s/%s names inode %d: %w", bucket, entry, got, base.ErrIO)
		}
		return o.fromTrash(b, ba, entry, ino, parent, name)
	})
	if err != nil {
		return 0, "", err
	}
	return parent, name, nil
}

// trashBucketNamed returns the bucket name of the trash.
func (o *op) trashBucketNamed(bucket string) (base.Ino, *base.Attr, error) {
	t, _, err := o.trashDir(false)
	if err != nil {
		return 0, nil, err
	}
	if t == 0 {
		return 0, nil, fmt.Errorf("the volume has no trash: %w", base.ErrNotFound)
	}
	b, _, ok, err := getDentry(o, t, bucket)
	if err != nil {
		return 0, nil, err
	}
	if !ok {
		return 0, nil, fmt.Errorf("trash bucket %q: %w", bucket, base.ErrNotFound)
	}
	ba, err := o.dirAttr(b)
	if err != nil {
		return 0, nil, err
	}
	return b, ba, nil
}

// PurgeStats is what PurgeTrash did.
type PurgeStats struct {
	Entries int `json:"entries"` // entries removed
	Buckets int `json:"buckets"` // buckets removed
}

// purgeBatch is how many entries one purge transaction removes.
const purgeBatch = 128

// PurgeTrash destroys the trash's entries removed before before: every
// bucket whose hour ended at or before it (the zero time: every bucket).
// The inodes go as in any removal (dropLink, destroy): their slices are
// queued for deletion, an open file stays until its last close.
func (m *Meta) PurgeTrash(ctx context.Context, before time.Time) (PurgeStats, error) {
	var st PurgeStats
	if m.opts.ReadOnly {
		return st, base.ErrReadOnly
	}
	var buckets []string
	err := m.view(ctx, func(r kv.Reader) error {
		buckets = nil
		t, _, ok, err := getDentry(r, base.RootIno, TrashName)
		if err != nil || !ok {
			return err
		}
		if ta, err := getAttr(r, t); err != nil || !isTrashDir(&ta) {
			return err
		}
		ents, err := readdirAt(r, RootCaller, t, "", 0, false, latestEpoch)
		for _, e := range ents {
			buckets = append(buckets, e.Name)
		}
		return err
	})
	if err != nil {
		return st, err
	}
	sort.Strings(buckets)
	for _, bucket := range buckets {
		if !before.IsZero() {
			h, err := time.Parse(TrashBucketLayout, bucket)
			if err != nil || h.Add(time.Hour).After(before) {
				continue // not a bucket, or not old enough
			}
		}
		for done := false; !done; {
			n, removed := 0, false
			err := m.mutate(kv.Freeing(ctx), func(o *op) error {
				n, done, removed = 0, false, false
				var err error
				n, done, removed, err = o.purgeBucket(bucket)
				return err
			})
			if err != nil {
				return st, fmt.Errorf("purging trash bucket %s: %w", bucket, err)
			}
			st.Entries += n
			if removed {
				st.Buckets++
			}
			if n == 0 && !done {
				break
			}
		}
	}
	return st, nil
}

// purgeBucket destroys up to purgeBatch entries of bucket, then (done)
// the bucket if it is empty and older than bucketKeep (removed).
func (o *op) purgeBucket(bucket string) (n int, done, removed bool, err error) {
	t, ta, err := o.trashDir(false)
	if err != nil || t == 0 {
		return 0, true, false, err
	}
	b, ok := base.Ino(0), false
	if b, _, ok, err = getDentry(o, t, bucket); err != nil || !ok {
		return 0, true, false, err
	}
	ba, err := o.dirAttr(b)
	if err != nil {
		return 0, false, false, err
	}
	ents, err := readdirAt(o, RootCaller, b, "", purgeBatch, false, latestEpoch)
	if err != nil {
		return 0, false, false, err
	}
	for _, e := range ents {
		a, err := o.attr(e.Ino)
		if err != nil {
			return 0, false, false, err
		}
		if err := o.vdel(dentryKey(b, e.Name)); err != nil {
			return 0, false, false, err
		}
		if a.Type == base.TypeDir {
			if full, err := hasEntries(o, e.Ino); err != nil {
				return 0, false, false, err
			} else if full {
				return 0, false, false, fmt.Errorf("trashed directory %d is not empty: %w", e.Ino, base.ErrIO)
			}
			ba.Nlink--
			if err := o.destroy(e.Ino, a); err != nil {
				return 0, false, false, err
			}
		} else if err := o.dropLink(e.Ino, a); err != nil {
			return 0, false, false, err
		}
		n++
	}
	o.touchDir(b, ba)
	if len(ents) == purgeBatch {
		return n, false, false, nil
	}
	if full, err := hasEntries(o, b); err != nil || full {
		return n, false, false, err
	}
	if h, err := time.Parse(TrashBucketLayout, bucket); err == nil && time.Unix(0, o.now).Before(h.Add(bucketKeep)) {
		// A bucket of the last two hours stays, empty: removals write
		// into it without reading the trash's path (trashBucket), which
		// under snapshot isolation would not conflict with its removal.
		return n, true, false, nil
	}
	if err := o.vdel(dentryKey(t, bucket)); err != nil {
		return 0, false, false, err
	}
	ta.Nlink--
	o.touchDir(t, ta)
	return n, true, true, o.destroy(b, ba)
}

// ClaimTrashPurge claims the purge of the trash for the interval now falls
// in, as ClaimBackup claims a backup: ok for one client of the volume per
// interval (now truncated to a multiple of interval), and only if the last
// claim is at least half an interval old.
func (m *Meta) ClaimTrashPurge(ctx context.Context, now time.Time, interval time.Duration) (ok bool, err error) {
	if m.opts.ReadOnly {
		return false, base.ErrReadOnly
	}
	if interval <= 0 {
		interval = time.Nanosecond
	}
	err = m.update(ctx, func(t *wtx) error {
		ok = false
		last, err := counter(t, counterTrashClaim)
		if err != nil {
			return err
		}
		prev := time.Unix(0, int64(last))
		if last != 0 && (prev.Truncate(interval).Equal(now.Truncate(interval)) || now.Sub(prev) < interval/2) {
			return nil
		}
		t.Set(counterKey(counterTrashClaim), u64(nil, uint64(now.UnixNano())))
		ok = true
		return nil
	})
	return ok && err == nil, err
}
