package cache

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/directio"
	"github.com/cairnfs/cairn/internal/metrics"
)

// Defaults of DiskOptions.
const (
	DefaultDiskSize       = 10 << 30
	DefaultFreeRatio      = 0.1
	DefaultWriteQueue     = 64 << 20
	DefaultDiskWriters    = 2
	DefaultSpaceCheck     = 10 * time.Second
	diskHeaderLen         = 20
	diskMagic             = "CRNC"
	diskVersion           = 3
	diskSubdir            = "blocks"
	diskLockName          = "cairn-cache.lock"
	diskTempPrefix        = ".tmp-"
	maxDiskKeyLen         = 1 << 15
	diskQueueMaxItems     = 4096
	spaceWarnEveryNthSkip = 1000
)

// ErrDirInUse is wrapped by the error of OpenDisk when another Disk (in
// this or another process) holds one of the directories.
var ErrDirInUse = errors.New("cache: disk cache directory in use")

// ErrNoRoom is returned by Disk.Write when the block cannot be cached: it
// is larger than the cache allows, or the file system holding the cache
// directory is too full even after evicting.
var ErrNoRoom = errors.New("cache: no room in the disk cache")

// DiskOptions configures a Disk cache. Zero values mean the defaults.
type DiskOptions struct {
	// Dirs are the directories blocks are kept in (created if missing);
	// each block goes to one of them by a hash of its key. At least one.
	// The set must stay the same across restarts for cached blocks to be
	// found again (blocks in a directory that is no longer listed are
	// ignored; in one listed at another position they are dropped).
	Dirs []string
	// MaxBytes bounds the bytes of all cache files (headers included).
	// Default 10 GiB. Blocks larger than MaxBytes/8 are not cached.
	MaxBytes int64
	// FreeRatio is the floor of free space, as a fraction of the file
	// system's size, below which the cache stops writing into a directory
	// and evicts from it. Default 0.1; negative disables the check.
	FreeRatio float64
	// FreeSpace returns the free (available to this user) and total bytes
	// of the file system holding dir. Default: statfs(2). Tests inject one.
	FreeSpace func(dir string) (free, total uint64, err error)
	// WriteQueue bounds the bytes of Puts waiting to be written; Puts
	// beyond it are dropped (counted in DiskStats.Dropped). Default 64 MiB.
	WriteQueue int64
	// Writers is the number of goroutines writing queued Puts. Default 2.
	Writers int
	// SpaceCheck is how often the free space of every directory is
	// checked in the background. Default 10 s.
	SpaceCheck time.Duration
	// Logger receives corrupt files, I/O errors and the end of the scan.
	// Default: discard.
	Logger *slog.Logger
}

// Validate fills in defaults and checks the options.
func (o *DiskOptions) Validate() error {
	if len(o.Dirs) == 0 {
		return errors.New("cache: disk cache without a directory")
	}
	seen := make(map[string]bool, len(o.Dirs))
	for _, d := range o.Dirs {
		if d == "" {
			return errors.New("cache: empty disk cache directory")
		}
		c := filepath.Clean(d)
		if seen[c] {
			return fmt.Errorf("cache: disk cache directory %s is listed twice", d)
		}
		seen[c] = true
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultDiskSize
	}
	if o.MaxBytes < 0 {
		return fmt.Errorf("cache: negative disk cache size %d", o.MaxBytes)
	}
	if o.FreeRatio == 0 {
		o.FreeRatio = DefaultFreeRatio
	}
	if o.FreeRatio >= 1 {
		return fmt.Errorf("cache: free-space ratio %g: want less than 1", o.FreeRatio)
	}
	if o.FreeSpace == nil {
		o.FreeSpace = statfsFree
	}
	if o.WriteQueue == 0 {
		o.WriteQueue = DefaultWriteQueue
	}
	if o.Writers == 0 {
		o.Writers = DefaultDiskWriters
	}
	if o.WriteQueue < 0 || o.Writers < 0 {
		return errors.New("cache: negative disk cache write queue or writers")
	}
	if o.SpaceCheck <= 0 {
		o.SpaceCheck = DefaultSpaceCheck
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func statfsFree(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// Disk is a block cache kept as files in local directories. It survives
// restarts (Open rebuilds its index from the files in the background), is
// bounded by DiskOptions.MaxBytes and by the free space of its file
// systems, evicts the least recently used blocks (recency is kept in
// memory; after a restart it starts from the files' modification times),
// and verifies every block it returns: each file carries a CRC-32C of its
// key and content, and a file that fails the check is deleted, logged and
// counted, and reported as a miss — never returned.
//
// Each file holds one block: a header, its key, a CRC-32C per 64 KiB
// segment of its data, and the data (see diskfile.go); ReadRange reads
// and verifies only the segments a small read needs.
//
// A block with key K lives in Dirs[h % len(Dirs)]/blocks/<hh>/<h>, where h
// is the first 16 bytes of SHA-256(K) in hex and hh its first two digits.
// Files are written to a temporary name in the same directory and renamed
// into place, so a reader sees a whole file or none; they are not fsynced
// (a crash may leave a torn file, which the CRCs catch). An open Disk holds
// each directory alone (a flock on Dirs[i]/cairn-cache.lock): OpenDisk of a
// directory in use fails with ErrDirInUse.
//
// Disk is safe for concurrent use. Slices it returns are the caller's.
type Disk struct {
	opts    DiskOptions
	log     *slog.Logger
	maxItem int64
	direct  directio.Writer // writes cold blocks (writeFile)

	mu       sync.Mutex
	index    map[string]*list.Element // of *diskEntry
	lru      list.List                // front is most recently used
	bytes    int64
	dirBytes []int64
	pending  map[string]bool // queued for writing
	queued   int64           // bytes queued
	scanning bool

	queue chan diskJob
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	locks []*os.File // one per directory, flocked while open

	hits, misses, hitBytes            atomic.Int64
	writes, writeBytes, dropped       atomic.Int64
	evictions, spaceEvictions         atomic.Int64
	corrupt, ioErrors, bytesN, itemsN atomic.Int64
	readLatency                       metrics.Histogram
}

type diskEntry struct {
	key  string
	dir  int
	size int64
}

type diskJob struct {
	key  string
	data []byte
	cold bool   // PutSums: past the page cache
	sums []byte // PutSums: the segment checksums, or nil
}

var _ interface {
	Get(string) ([]byte, bool)
	Put(string, []byte)
	Delete(string)
} = (*Disk)(nil)

// OpenDisk opens (creating if needed) a disk cache and starts rebuilding
// its index from the files already there, in the background: until the
// scan ends, Get also looks for files not yet indexed. Close stops it.
func OpenDisk(o DiskOptions) (*Disk, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var locks []*os.File
	for _, dir := range o.Dirs {
		if err := os.MkdirAll(filepath.Join(dir, diskSubdir), 0o700); err != nil {
			closeAll(locks)
			return nil, fmt.Errorf("cache: disk cache directory: %w", err)
		}
		f, err := lockDir(dir)
		if err != nil {
			closeAll(locks)
			return nil, err
		}
		locks = append(locks, f)
	}
	d := &Disk{
		locks:    locks,
		opts:     o,
		log:      o.Logger,
		maxItem:  o.MaxBytes / 8,
		index:    make(map[string]*list.Element),
		dirBytes: make([]int64, len(o.Dirs)),
		pending:  make(map[string]bool),
		scanning: true,
		queue:    make(chan diskJob, diskQueueMaxItems),
		stop:     make(chan struct{}),
	}
	for range o.Writers {
		d.wg.Go(d.writer)
	}
	d.wg.Go(d.scan)
	d.wg.Go(d.watchSpace)
	return d, nil
}

// Close stops the background work and waits for it. Puts still queued are
// dropped; files already written stay for the next Open.
func (d *Disk) Close() error {
	d.once.Do(func() { close(d.stop) })
	d.wg.Wait()
	closeAll(d.locks) // releases the directories
	d.locks = nil
	return nil
}

// lockDir takes the directory dir for this Disk: an exclusive flock on its
// lock file, which holds the pid of its holder for the message a second
// user gets. Two caches in one directory would each evict the other's
// blocks without counting them (the bound would not hold) and delete each
// other's temporary files. The kernel drops the lock when the process
// ends, however it ends, so a crash leaves nothing to clean up.
func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, diskLockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache: disk cache directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := io.ReadAll(io.LimitReader(f, 32)); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is used by %s (each mount needs its own --cache-dir)", ErrDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("cache: lock disk cache directory %s: %w", dir, err)
	}
	// Best effort: the pid only makes the message of the next user better.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return f, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// path returns the directory index and file path of key.
func (d *Disk) path(key string) (int, string) {
	sum := sha256.Sum256([]byte(key))
	name := hex.EncodeToString(sum[:16])
	dir := int(binary.BigEndian.Uint64(sum[16:24]) % uint64(len(d.opts.Dirs)))
	return dir, filepath.Join(d.opts.Dirs[dir], diskSubdir, name[:2], name)
}

// readFile reads and verifies the file of key.
func (d *Disk) readFile(key string) ([]byte, error) {
	_, p := d.path(key)
	buf, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	data, err := decodeFile(buf, key)
	if err != nil {
		return nil, fileErr(p, err)
	}
	return data, nil
}

// fileErr names the file in err; a file of another key is reported as
// fs.ErrNotExist (ours is not there).
func fileErr(p string, err error) error {
	if errors.Is(err, errOtherKey) {
		return fmt.Errorf("%s: %w: %w", p, err, fs.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", p, err)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Get returns the block cached under key, verified, or false. It reads
// the file (disk I/O): call it outside locks. A corrupt file is deleted
// and reported as a miss.
func (d *Disk) Get(key string) ([]byte, bool) {
	indexed, scanning := d.touch(key)
	if !indexed && !scanning {
		d.misses.Add(1)
		return nil, false
	}
	start := time.Now()
	data, err := d.readFile(key)
	if err != nil {
		d.failed(key, indexed, err)
		return nil, false
	}
	d.hit(key, indexed, start, len(data), fileSize(key, len(data)))
	return data, true
}

// hit counts a read of n bytes of key's file of size bytes that began at
// start, and indexes a file found before the scan reached it.
func (d *Disk) hit(key string, indexed bool, start time.Time, n int, size int64) {
	d.readLatency.Since(start)
	d.hits.Add(1)
	d.hitBytes.Add(int64(n))
	if !indexed {
		dir, _ := d.path(key)
		d.insert(key, dir, size, true)
	}
}

// touch marks key as just used and reports whether it is indexed and
// whether the scan still runs (an unindexed file may then exist).
func (d *Disk) touch(key string) (indexed, scanning bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	el, indexed := d.index[key]
	if indexed {
		d.lru.MoveToFront(el)
	}
	return indexed, d.scanning
}

// failed counts and logs a read of key that failed with err, removes a
// file that is not sound, and unindexes key.
func (d *Disk) failed(key string, indexed bool, err error) {
	d.misses.Add(1)
	if !errors.Is(err, fs.ErrNotExist) {
		switch {
		case errors.Is(err, errOldFormat):
			// Written by an older Cairn: dropped quietly, refetched.
		case errors.Is(err, errCorrupt):
			d.corrupt.Add(1)
			d.log.Error("disk cache: corrupt block file dropped; the block is fetched again", "key", key, "err", err)
		default:
			d.ioErrors.Add(1)
			d.log.Warn("disk cache: read failed; the block is fetched again", "key", key, "err", err)
		}
		_, p := d.path(key)
		_ = os.Remove(p)
	}
	if indexed {
		d.forget(key)
	}
}

// ReadRange returns bytes [off, off+n) of the block cached under key,
// reading and verifying only the segments of the file that hold them
// (one small read for the header and segment table, one for the
// segments), or false. A corrupt file is deleted and reported as a miss,
// as by Get; a range the block does not hold is a miss that keeps it.
func (d *Disk) ReadRange(key string, off, n int) ([]byte, bool) {
	indexed, scanning := d.touch(key)
	if (!indexed && !scanning) || off < 0 || n <= 0 {
		d.misses.Add(1)
		return nil, false
	}
	start := time.Now()
	data, size, err := d.readRange(key, off, n)
	if errors.Is(err, errOutOfRange) {
		d.misses.Add(1)
		return nil, false
	}
	if err != nil {
		d.failed(key, indexed, err)
		return nil, false
	}
	d.hit(key, indexed, start, n, size)
	return data, true
}

var errOutOfRange = errors.New("range past the cached block")

// metaGuess is how much of a file ReadRange reads first: the header, a key
// and the segment table of a 4 MiB block fit, padded to the data.
const metaGuess = directio.Align

// readRange reads bytes [off, off+n) of key's file, verified, and returns
// them and the file's size.
func (d *Disk) readRange(key string, off, n int) ([]byte, int64, error) {
	_, p := d.path(key)
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	meta := make([]byte, min(fi.Size(), metaGuess))
	if _, err := f.ReadAt(meta, 0); err != nil {
		return nil, 0, readErr(p, err)
	}
	h, err := parseHead(meta)
	if err != nil {
		return nil, 0, fileErr(p, err)
	}
	if h.size() != fi.Size() {
		return nil, 0, fmt.Errorf("%s: %d bytes, header says %d: %w", p, fi.Size(), h.size(), errCorrupt)
	}
	if len(meta) < h.dataOff() {
		meta = make([]byte, h.dataOff())
		if _, err := f.ReadAt(meta, 0); err != nil {
			return nil, 0, readErr(p, err)
		}
	}
	table, err := checkMeta(meta, h, key)
	if err != nil {
		return nil, 0, fileErr(p, err)
	}
	if off+n > h.dlen {
		return nil, 0, errOutOfRange
	}
	first := off >> h.shift
	lo, hi := first<<h.shift, min(((off+n-1)>>h.shift+1)<<h.shift, h.dlen)
	data := make([]byte, hi-lo)
	if _, err := f.ReadAt(data, int64(h.dataOff()+lo)); err != nil {
		return nil, 0, readErr(p, err)
	}
	if err := checkSegs(h, table, first, data); err != nil {
		return nil, 0, fileErr(p, err)
	}
	return data[off-lo : off-lo+n], fi.Size(), nil
}

// readErr reports a short read (the file changed size under us) as
// corruption and other errors as they are.
func readErr(p string, err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: short read: %w", p, errCorrupt)
	}
	return err
}

// Has reports whether key is indexed (no I/O). A true answer may still
// turn into a miss (the file was corrupt or removed meanwhile).
func (d *Disk) Has(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.index[key]
	return ok
}

// Put queues data to be written under key, in the background, unless key
// is cached or queued already. It never blocks: when the write queue is
// full the block is dropped. It keeps data until written; nobody may
// modify it.
func (d *Disk) Put(key string, data []byte) { d.put(key, data, nil, false) }

// PutSums is Put for a block whose segment checksums the caller has:
// sums, if not nil, are the CRC-32C (Castagnoli, big-endian) of data's
// 64 KiB segments, already checked against data by the caller, and become
// the file's segment table at no second pass over the block (a wrong
// table only makes the file fail its checks when read). The Disk keeps
// sums with data.
//
// cold marks a block that is not read back soon (a block a sequential
// writer uploaded): its file is written with direct I/O where the file
// system allows it, without a copy in the page cache. Later reads of it
// come from the device, which is what the disk tier is for.
func (d *Disk) PutSums(key string, data, sums []byte, cold bool) { d.put(key, data, sums, cold) }

func (d *Disk) put(key string, data, sums []byte, cold bool) {
	size := fileSize(key, len(data))
	if size > d.maxItem || len(key) > maxDiskKeyLen {
		d.dropped.Add(1)
		return
	}
	d.mu.Lock()
	if _, ok := d.index[key]; ok || d.pending[key] {
		d.mu.Unlock()
		return
	}
	if d.queued+size > d.opts.WriteQueue {
		d.mu.Unlock()
		d.dropped.Add(1)
		return
	}
	select {
	case d.queue <- diskJob{key, data, cold, sums}:
		d.pending[key] = true
		d.queued += size
	default:
		d.dropped.Add(1)
	}
	d.mu.Unlock()
}

// Write stores data under key now and returns once the file is in place
// (or the block was cached already). It fails with ErrNoRoom when the
// block cannot be kept (too large, or the disk too full), or with the
// I/O error. It does not keep data.
func (d *Disk) Write(key string, data []byte) error {
	if d.Has(key) {
		return nil
	}
	return d.write(key, data, nil, false)
}

func (d *Disk) writer() {
	for {
		select {
		case <-d.stop:
			return
		case j := <-d.queue:
			if err := d.write(j.key, j.data, j.sums, j.cold); err != nil && !errors.Is(err, ErrNoRoom) {
				d.log.Warn("disk cache: write failed", "key", j.key, "err", err)
			}
			d.mu.Lock()
			delete(d.pending, j.key)
			d.queued -= fileSize(j.key, len(j.data))
			d.mu.Unlock()
		}
	}
}

// write writes the file of key and indexes it; sums and cold: see
// PutSums.
func (d *Disk) write(key string, data, sums []byte, cold bool) error {
	size := fileSize(key, len(data))
	if size > d.maxItem || len(key) > maxDiskKeyLen {
		d.dropped.Add(1)
		return ErrNoRoom
	}
	dir, p := d.path(key)
	if !d.makeRoom(dir, size) {
		if n := d.dropped.Add(1); n%spaceWarnEveryNthSkip == 1 {
			d.log.Warn("disk cache: file system below its free-space floor; not caching", "dir", d.opts.Dirs[dir], "free_ratio", d.opts.FreeRatio)
		}
		return ErrNoRoom
	}
	tmp := filepath.Join(filepath.Dir(p), diskTempPrefix+filepath.Base(p)+"-"+fmt.Sprintf("%08x", rand.Uint32()))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
			f, err = os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}
	}
	if err != nil {
		d.ioErrors.Add(1)
		return err
	}
	err = d.writeFile(f, encodeHead(key, data, sums), data, cold)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		d.ioErrors.Add(1)
		return err
	}
	d.writes.Add(1)
	d.writeBytes.Add(size)
	d.insert(key, dir, size, true)
	return nil
}

// writeFile writes head and then data, in place (no copy of the block),
// to the new file f. A cold block's data goes with direct I/O where it
// can (directio.Writer; a padded file's data starts on a page).
func (d *Disk) writeFile(f *os.File, head, data []byte, cold bool) error {
	if !cold || !padded(len(data)) {
		_, err := (&net.Buffers{head, data}).WriteTo(f)
		return err
	}
	if _, err := f.Write(head); err != nil {
		return err
	}
	_, err := d.direct.WriteAt(f, data, int64(len(head)))
	return err
}

// insert indexes key (at the front, or at the back for blocks found by
// the scan) and evicts until the cache is within its bound.
func (d *Disk) insert(key string, dir int, size int64, front bool) {
	var victims []string
	d.mu.Lock()
	if el, ok := d.index[key]; ok {
		d.removeLocked(el)
	}
	for d.bytes+size > d.opts.MaxBytes && d.lru.Len() > 0 {
		v := d.removeLocked(d.lru.Back())
		victims = append(victims, v.key)
		d.evictions.Add(1)
	}
	e := &diskEntry{key: key, dir: dir, size: size}
	if front {
		d.index[key] = d.lru.PushFront(e)
	} else {
		d.index[key] = d.lru.PushBack(e)
	}
	d.bytes += size
	d.dirBytes[dir] += size
	d.itemsN.Add(1)
	d.bytesN.Store(d.bytes)
	d.mu.Unlock()
	d.removeFiles(victims)
}

// removeLocked unindexes el; d.mu is held.
func (d *Disk) removeLocked(el *list.Element) *diskEntry {
	e := d.lru.Remove(el).(*diskEntry)
	delete(d.index, e.key)
	d.bytes -= e.size
	d.dirBytes[e.dir] -= e.size
	d.bytesN.Store(d.bytes)
	d.itemsN.Add(-1)
	return e
}

// removeFiles deletes the files of keys already unindexed. A Put of the
// same key racing with it may lose its new file; the next Get then misses
// and unindexes it.
func (d *Disk) removeFiles(keys []string) {
	for _, k := range keys {
		_, p := d.path(k)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("disk cache: removing evicted file", "err", err)
		}
	}
}

func (d *Disk) forget(key string) {
	d.mu.Lock()
	if el, ok := d.index[key]; ok {
		d.removeLocked(el)
	}
	d.mu.Unlock()
}

// Delete drops key from the cache and deletes its file.
func (d *Disk) Delete(key string) {
	d.mu.Lock()
	el, ok := d.index[key]
	if ok {
		d.removeLocked(el)
	}
	scanning := d.scanning
	d.mu.Unlock()
	if ok || scanning {
		d.removeFiles([]string{key})
	}
}

// makeRoom reports whether size more bytes fit in directory dir above the
// free-space floor, evicting that directory's least recently used blocks
// to make them fit.
func (d *Disk) makeRoom(dir int, size int64) bool {
	if d.opts.FreeRatio < 0 {
		return true
	}
	free, total, err := d.opts.FreeSpace(d.opts.Dirs[dir])
	if err != nil {
		d.ioErrors.Add(1)
		return false
	}
	floor := uint64(d.opts.FreeRatio * float64(total))
	if free >= floor+uint64(size) {
		return true
	}
	need := int64(floor + uint64(size) - free)
	return d.evictDir(dir, need) >= need
}

// evictDir evicts least recently used blocks of directory dir until need
// bytes are freed or none are left, and returns the bytes freed.
func (d *Disk) evictDir(dir int, need int64) int64 {
	var victims []string
	var freed int64
	d.mu.Lock()
	if d.dirBytes[dir] < need {
		// Evicting everything would not be enough: keep what we have.
		d.mu.Unlock()
		return 0
	}
	for el := d.lru.Back(); el != nil && freed < need; {
		prev := el.Prev()
		if e := el.Value.(*diskEntry); e.dir == dir {
			d.removeLocked(el)
			victims = append(victims, e.key)
			freed += e.size
			d.spaceEvictions.Add(1)
		}
		el = prev
	}
	d.mu.Unlock()
	d.removeFiles(victims)
	return freed
}

// watchSpace evicts from directories whose file system fell below the
// free-space floor (something else filled it), every SpaceCheck.
func (d *Disk) watchSpace() {
	if d.opts.FreeRatio < 0 {
		return
	}
	t := time.NewTicker(d.opts.SpaceCheck)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		for i, dir := range d.opts.Dirs {
			free, total, err := d.opts.FreeSpace(dir)
			if err != nil {
				continue
			}
			if floor := uint64(d.opts.FreeRatio * float64(total)); free < floor {
				need := int64(floor - free)
				d.mu.Lock()
				need = min(need, d.dirBytes[i]) // free what we can
				d.mu.Unlock()
				if need > 0 {
					d.evictDir(i, need)
				}
			}
		}
	}
}

// scan indexes the files already in the cache directories, oldest at the
// back, removes temporary files and files that do not belong, and then
// ends the scanning state.
func (d *Disk) scan() {
	start := time.Now()
	type found struct {
		key   string
		dir   int
		size  int64
		mtime time.Time
	}
	var all []found
	stopped := false
	oldFormat := 0
	for i, dir := range d.opts.Dirs {
		root := filepath.Join(dir, diskSubdir)
		_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			select {
			case <-d.stop:
				stopped = true
				return filepath.SkipAll
			default:
			}
			if err != nil || de.IsDir() {
				return nil
			}
			if strings.HasPrefix(de.Name(), diskTempPrefix) {
				_ = os.Remove(p)
				return nil
			}
			key, size, mtime, err := readHeader(p)
			if err == nil {
				if di, want := d.path(key); di != i || want != p {
					err = errors.New("file is not where its key belongs")
				}
			}
			if errors.Is(err, errOldFormat) {
				oldFormat++
				_ = os.Remove(p)
				return nil
			}
			if err != nil {
				d.log.Warn("disk cache: removing a file that is not a cached block", "path", p, "err", err)
				_ = os.Remove(p)
				return nil
			}
			all = append(all, found{key, i, size, mtime})
			return nil
		})
	}
	// Newest first, each pushed to the back: blocks cached since Open
	// stay in front of them.
	sort.Slice(all, func(a, b int) bool { return all[a].mtime.After(all[b].mtime) })
	for _, f := range all {
		if stopped {
			break
		}
		if d.Has(f.key) {
			continue
		}
		d.insert(f.key, f.dir, f.size, false)
	}
	d.mu.Lock()
	d.scanning = false
	d.mu.Unlock()
	if !stopped {
		s := d.Stats()
		d.log.Info("disk cache index rebuilt", "dirs", d.opts.Dirs, "blocks", s.Items, "bytes", s.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}
	if oldFormat > 0 {
		d.log.Info("disk cache: removed files of an older format", "files", oldFormat)
	}
}

// readHeader reads the key of a cache file and checks that its size
// matches the header (the content is verified when it is read).
func readHeader(p string) (key string, size int64, mtime time.Time, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, time.Time{}, err
	}
	var hdr [diskHeaderLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return "", 0, time.Time{}, err
	}
	h, err := parseHead(hdr[:])
	if err != nil {
		return "", 0, time.Time{}, err
	}
	if fi.Size() != h.size() {
		return "", 0, time.Time{}, fmt.Errorf("%d bytes, header says %d", fi.Size(), h.size())
	}
	kb := make([]byte, h.klen)
	if _, err := io.ReadFull(f, kb); err != nil {
		return "", 0, time.Time{}, err
	}
	return string(kb), fi.Size(), fi.ModTime(), nil
}

// Scanning reports whether the index is still being rebuilt.
func (d *Disk) Scanning() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scanning
}

// DiskStats are a Disk cache's counters; all but Bytes, Items and
// Scanning only grow.
type DiskStats struct {
	Hits           int64                     `json:"hits"`
	Misses         int64                     `json:"misses"`
	HitBytes       int64                     `json:"hit_bytes"`   // data bytes served
	Writes         int64                     `json:"writes"`      // files written
	WriteBytes     int64                     `json:"write_bytes"` // file bytes written
	Dropped        int64                     `json:"dropped"`     // blocks not cached: queue full, too large, no room
	Evictions      int64                     `json:"evictions"`   // by the size bound
	SpaceEvictions int64                     `json:"space_evictions"`
	Corrupt        int64                     `json:"corrupt"` // files that failed verification (deleted)
	IOErrors       int64                     `json:"io_errors"`
	Bytes          int64                     `json:"bytes"` // file bytes cached now
	Items          int64                     `json:"items"`
	Scanning       bool                      `json:"scanning"`
	ReadLatency    metrics.HistogramSnapshot `json:"read_latency"` // of hits
}

// Stats returns the counters, each read atomically but not all at one
// instant.
func (d *Disk) Stats() DiskStats {
	return DiskStats{
		Hits: d.hits.Load(), Misses: d.misses.Load(), HitBytes: d.hitBytes.Load(),
		Writes: d.writes.Load(), WriteBytes: d.writeBytes.Load(), Dropped: d.dropped.Load(),
		Evictions: d.evictions.Load(), SpaceEvictions: d.spaceEvictions.Load(),
		Corrupt: d.corrupt.Load(), IOErrors: d.ioErrors.Load(),
		Bytes: d.bytesN.Load(), Items: d.itemsN.Load(), Scanning: d.Scanning(),
		ReadLatency: d.readLatency.Snapshot(),
	}
}
