package nfsclient

import (
	"fmt"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// StatusError is an NFS procedure that failed with an nfsstat3.
type StatusError uint32

func (e StatusError) Error() string { return fmt.Sprintf("nfs status %d", uint32(e)) }

// call runs an NFSv3 procedure and returns a reader positioned after its
// status, or the status as a StatusError.
func (c *Client) call(proc uint32, args *proto.Writer) (*proto.Reader, error) {
	res, err := c.Call(proto.ProgNFS, proto.NFSVersion, proc, args.B)
	return status(res, err)
}

// status reads the nfsstat3 that starts the results res of a call that
// returned err.
func status(res []byte, err error) (*proto.Reader, error) {
	if err != nil {
		return nil, err
	}
	r := proto.NewReader(res)
	if st := r.Uint32(); st != proto.NFS3OK {
		return r, StatusError(st)
	}
	return r, r.Err()
}

// GetAttr returns the attributes of fh.
func (c *Client) GetAttr(fh []byte) (proto.Fattr3, error) {
	var w proto.Writer
	w.Opaque(fh)
	r, err := c.call(proto.NFSProcGetAttr, &w)
	if err != nil {
		return proto.Fattr3{}, err
	}
	a := proto.DecodeFattr3(r)
	return a, r.Err()
}

// SetAttr sets attributes of fh.
func (c *Client) SetAttr(fh []byte, sa proto.Sattr3) error {
	var w proto.Writer
	w.Opaque(fh)
	sa.Encode(&w)
	w.Bool(false)
	_, err := c.call(proto.NFSProcSetAttr, &w)
	return err
}

func dirOp(w *proto.Writer, dir []byte, name string) {
	w.Opaque(dir)
	w.String(name)
}

// Lookup returns the handle and attributes of dir/name.
func (c *Client) Lookup(dir []byte, name string) ([]byte, proto.Fattr3, error) {
	var w proto.Writer
	dirOp(&w, dir, name)
	r, err := c.call(proto.NFSProcLookup, &w)
	if err != nil {
		return nil, proto.Fattr3{}, err
	}
	fh := append([]byte(nil), r.Opaque(proto.MaxFHSize)...)
	a, _ := proto.DecodePostOpAttr(r)
	return fh, a, r.Err()
}

// Access returns the ACCESS bits granted among want.
func (c *Client) Access(fh []byte, want uint32) (uint32, error) {
	var w proto.Writer
	w.Opaque(fh)
	w.Uint32(want)
	r, err := c.call(proto.NFSProcAccess, &w)
	if err != nil {
		return 0, err
	}
	proto.DecodePostOpAttr(r)
	return r.Uint32(), r.Err()
}

// newObject reads the post_op_fh3 and post_op_attr of a creating call.
func newObject(r *proto.Reader) ([]byte, error) {
	if !r.Bool() {
		return nil, fmt.Errorf("no handle returned")
	}
	fh := append([]byte(nil), r.Opaque(proto.MaxFHSize)...)
	proto.DecodePostOpAttr(r)
	return fh, r.Err()
}

// Create makes a regular file with createmode how (UNCHECKED or GUARDED
// with sa, EXCLUSIVE with verf).
func (c *Client) Create(dir []byte, name string, how uint32, sa proto.Sattr3, verf [8]byte) ([]byte, error) {
	var w proto.Writer
	dirOp(&w, dir, name)
	w.Uint32(how)
	if how == proto.CreateExclusive {
		w.Fixed(verf[:])
	} else {
		sa.Encode(&w)
	}
	r, err := c.call(proto.NFSProcCreate, &w)
	if err != nil {
		return nil, err
	}
	return newObject(r)
}

// Mkdir makes a directory.
func (c *Client) Mkdir(dir []byte, name string, mode uint32) ([]byte, error) {
	var w proto.Writer
	dirOp(&w, dir, name)
	(&proto.Sattr3{Mode: &mode}).Encode(&w)
	r, err := c.call(proto.NFSProcMkdir, &w)
	if err != nil {
		return nil, err
	}
	return newObject(r)
}

// Symlink makes a symbolic link.
func (c *Client) Symlink(dir []byte, name, target string) ([]byte, error) {
	var w proto.Writer
	dirOp(&w, dir, name)
	(&proto.Sattr3{}).Encode(&w)
	w.String(target)
	r, err := c.call(proto.NFSProcSymlink, &w)
	if err != nil {
		return nil, err
	}
	return newObject(r)
}

// Mknod makes a special file of ftype3 typ.
func (c *Client) Mknod(dir []byte, name string, typ uint32, mode, major, minor uint32) ([]byte, error) {
	var w proto.Writer
	dirOp(&w, dir, name)
	w.Uint32(typ)
	switch typ {
	case proto.NF3Chr, proto.NF3Blk:
		(&proto.Sattr3{Mode: &mode}).Encode(&w)
		w.Uint32(major)
		w.Uint32(minor)
	case proto.NF3Sock, proto.NF3FIFO:
		(&proto.Sattr3{Mode: &mode}).Encode(&w)
	}
	r, err := c.call(proto.NFSProcMknod, &w)
	if err != nil {
		return nil, err
	}
	return newObject(r)
}

// Readlink returns a symlink's target.
func (c *Client) Readlink(fh []byte) (string, error) {
	var w proto.Writer
	w.Opaque(fh)
	r, err := c.call(proto.NFSProcReadlink, &w)
	if err != nil {
		return "", err
	}
	proto.DecodePostOpAttr(r)
	return r.String(proto.MaxPath), r.Err()
}

// Read reads up to count bytes at off.
func (c *Client) Read(fh []byte, off uint64, count uint32) (data []byte, eof bool, err error) {
	k, err := c.SendRead(fh, off, count)
	if err != nil {
		return nil, false, err
	}
	return k.Wait()
}

// ReadCall is a READ that was sent; Wait takes its reply.
type ReadCall struct{ *Pending }

// SendRead sends a READ of up to count bytes at off without waiting for
// the reply.
func (c *Client) SendRead(fh []byte, off uint64, count uint32) (*ReadCall, error) {
	var w proto.Writer
	w.Opaque(fh)
	w.Uint64(off)
	w.Uint32(count)
	p, err := c.Send(proto.ProgNFS, proto.NFSVersion, proto.NFSProcRead, w.B)
	if err != nil {
		return nil, err
	}
	return &ReadCall{p}, nil
}

// Wait returns the data read and whether it ends the file.
func (k *ReadCall) Wait() (data []byte, eof bool, err error) {
	r, err := status(k.Pending.Wait())
	if err != nil {
		return nil, false, err
	}
	proto.DecodePostOpAttr(r)
	r.Uint32()
	eof = r.Bool()
	data = r.Opaque(1 << 30) // aliases the reply record, which is k's alone
	return data, eof, r.Err()
}

// Release gives the reply record back to the client, which reads a later
// reply into it: the data Wait returned must not be used after. Call it
// at most once, after Wait; a call without a reply (failed, timed out)
// releases nothing.
func (k *ReadCall) Release() {
	select {
	case <-k.done:
	default:
		return // not delivered: the reader may still hand it a record
	}
	if rec := k.rec; cap(rec) >= largeReply {
		k.rec = nil
		rec = rec[:0]
		k.c.bufs.Put(&rec)
	}
}

// WriteResult is what WRITE answers.
type WriteResult struct {
	Count     uint32
	Committed uint32
	Verf      [8]byte
	// After are the file's attributes after the write, if the server
	// sent them (AfterOK).
	After   proto.Fattr3
	AfterOK bool
}

// Write writes data at off with the stable_how stable.
func (c *Client) Write(fh []byte, off uint64, data []byte, stable uint32) (WriteResult, error) {
	k, err := c.SendWrite(fh, off, data, stable)
	if err != nil {
		return WriteResult{}, err
	}
	return k.Wait()
}

// WriteCall is a WRITE that was sent; Wait takes its reply.
type WriteCall struct{ *Pending }

// SendWrite sends a WRITE of data at off without waiting for the reply;
// data is not kept.
func (c *Client) SendWrite(fh []byte, off uint64, data []byte, stable uint32) (*WriteCall, error) {
	p, err := c.send(proto.ProgNFS, proto.NFSVersion, proto.NFSProcWrite, len(fh)+len(data)+32, func(w *proto.Writer) {
		w.Opaque(fh)
		w.Uint64(off)
		w.Uint32(uint32(len(data)))
		w.Uint32(stable)
		w.Opaque(data)
	})
	if err != nil {
		return nil, err
	}
	return &WriteCall{p}, nil
}

// Wait returns what the server answered.
func (k *WriteCall) Wait() (WriteResult, error) {
	r, err := status(k.Pending.Wait())
	if err != nil {
		return WriteResult{}, err
	}
	var res WriteResult
	res.After, res.AfterOK = proto.DecodeWcc(r)
	res.Count = r.Uint32()
	res.Committed = r.Uint32()
	copy(res.Verf[:], r.Fixed(8))
	return res, r.Err()
}

// Commit commits the file's unstable writes and returns the verifier.
func (c *Client) Commit(fh []byte) ([8]byte, error) {
	v, _, _, err := c.CommitAttr(fh)
	return v, err
}

// CommitAttr is Commit that also returns the file's attributes after the
// commit, if the server sent them (ok).
func (c *Client) CommitAttr(fh []byte) (v [8]byte, after proto.Fattr3, ok bool, err error) {
	var w proto.Writer
	w.Opaque(fh)
	w.Uint64(0)
	w.Uint32(0)
	r, err := c.call(proto.NFSProcCommit, &w)
	if err != nil {
		return v, after, false, err
	}
	after, ok = proto.DecodeWcc(r)
	copy(v[:], r.Fixed(8))
	return v, after, ok, r.Err()
}

// Remove unlinks dir/name.
func (c *Client) Remove(dir []byte, name string) error {
	var w proto.Writer
	dirOp(&w, dir, name)
	_, err := c.call(proto.NFSProcRemove, &w)
	return err
}

// Rmdir removes the directory dir/name.
func (c *Client) Rmdir(dir []byte, name string) error {
	var w proto.Writer
	dirOp(&w, dir, name)
	_, err := c.call(proto.NFSProcRmdir, &w)
	return err
}

// Rename moves fromDir/from to toDir/to.
func (c *Client) Rename(fromDir []byte, from string, toDir []byte, to string) error {
	var w proto.Writer
	dirOp(&w, fromDir, from)
	dirOp(&w, toDir, to)
	_, err := c.call(proto.NFSProcRename, &w)
	return err
}

// Link makes dir/name a hard link to fh.
func (c *Client) Link(fh, dir []byte, name string) error {
	var w proto.Writer
	w.Opaque(fh)
	dirOp(&w, dir, name)
	_, err := c.call(proto.NFSProcLink, &w)
	return err
}

// Entry is one READDIRPLUS entry.
type Entry struct {
	Name   string
	Fileid uint64
	Cookie uint64
	Attr   *proto.Fattr3
	Handle []byte
}

// ReadDirPlus lists a whole directory, count bytes per call, and
// returns the entries and the number of calls.
func (c *Client) ReadDirPlus(dir []byte, count uint32) ([]Entry, int, error) {
	var out []Entry
	calls, err := c.ReadDirPlusEach(dir, count, func(e Entry) { out = append(out, e) })
	return out, calls, err
}

// ReadDirPlusEach lists a whole directory, count bytes per call, passing
// each entry to fn as it is decoded (nothing is kept), and returns the
// number of calls.
func (c *Client) ReadDirPlusEach(dir []byte, count uint32, fn func(Entry)) (int, error) {
	var cookie uint64
	verf := make([]byte, 8)
	calls := 0
	for {
		var w proto.Writer
		w.Opaque(dir)
		w.Uint64(cookie)
		w.Fixed(verf)
		w.Uint32(count)
		w.Uint32(count)
		r, err := c.call(proto.NFSProcReadDirPlus, &w)
		calls++
		if err != nil {
			return calls, err
		}
		proto.DecodePostOpAttr(r)
		verf = append(verf[:0], r.Fixed(8)...)
		for r.Bool() {
			var e Entry
			e.Fileid = r.Uint64()
			e.Name = r.String(proto.MaxName)
			e.Cookie = r.Uint64()
			if a, ok := proto.DecodePostOpAttr(r); ok {
				e.Attr = &a
			}
			if r.Bool() {
				e.Handle = append([]byte(nil), r.Opaque(proto.MaxFHSize)...)
			}
			cookie = e.Cookie
			if r.Err() == nil {
				fn(e)
			}
		}
		eof := r.Bool()
		if r.Err() != nil {
			return calls, r.Err()
		}
		if eof {
			return calls, nil
		}
	}
}

// ReadDir lists a whole directory with READDIR and returns the names.
func (c *Client) ReadDir(dir []byte, count uint32) ([]string, error) {
	var out []string
	var cookie uint64
	verf := make([]byte, 8)
	for {
		var w proto.Writer
		w.Opaque(dir)
		w.Uint64(cookie)
		w.Fixed(verf)
		w.Uint32(count)
		r, err := c.call(proto.NFSProcReadDir, &w)
		if err != nil {
			return out, err
		}
		proto.DecodePostOpAttr(r)
		verf = append([]byte(nil), r.Fixed(8)...)
		for r.Bool() {
			r.Uint64()
			out = append(out, r.String(proto.MaxName))
			cookie = r.Uint64()
		}
		eof := r.Bool()
		if r.Err() != nil {
			return out, r.Err()
		}
		if eof {
			return out, nil
		}
	}
}

// FSStat returns total and available bytes.
func (c *Client) FSStat(fh []byte) (total, avail uint64, err error) {
	var w proto.Writer
	w.Opaque(fh)
	r, err := c.call(proto.NFSProcFSStat, &w)
	if err != nil {
		return 0, 0, err
	}
	proto.DecodePostOpAttr(r)
	total = r.Uint64()
	r.Uint64()
	avail = r.Uint64()
	return total, avail, r.Err()
}

// FSInfo is the part of FSINFO's answer a client sizes its calls by.
type FSInfo struct {
	RTMax, RTPref, RTMult uint32
	WTMax, WTPref, WTMult uint32
	DTPref                uint32
	MaxFileSize           uint64
}

// FSInfo asks the server's transfer sizes (fh: any handle of the file
// system, usually the root).
func (c *Client) FSInfo(fh []byte) (FSInfo, error) {
	var w proto.Writer
	w.Opaque(fh)
	r, err := c.call(proto.NFSProcFSInfo, &w)
	if err != nil {
		return FSInfo{}, err
	}
	proto.DecodePostOpAttr(r)
	var i FSInfo
	i.RTMax, i.RTPref, i.RTMult = r.Uint32(), r.Uint32(), r.Uint32()
	i.WTMax, i.WTPref, i.WTMult = r.Uint32(), r.Uint32(), r.Uint32()
	i.DTPref = r.Uint32()
	i.MaxFileSize = r.Uint64()
	return i, r.Err()
}
