package nfsclient

import (
	"fmt"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// NLM calls (the Network Lock Manager, version 4) and NSM calls (the
// status monitor, version 1) on the client's connection, as a client
// host's lock manager and statd send them. A call answers the nlm4_stats
// of the reply (proto.NLM4Granted and the others) and an error only when
// there was no well-formed reply.

// NLMTest calls TEST; with NLM4Denied it returns the conflicting holder.
func (c *Client) NLMTest(cookie []byte, exclusive bool, l proto.NLM4Lock) (uint32, proto.NLM4Holder, error) {
	var w proto.Writer
	a := proto.NLM4TestArgs{Cookie: cookie, Exclusive: exclusive, Lock: l}
	a.Encode(&w)
	r, st, err := c.nlmCall(proto.NLMProcTest, w.B, cookie)
	var h proto.NLM4Holder
	if err == nil && st == proto.NLM4Denied {
		h.Decode(r)
		h.OH = append([]byte(nil), h.OH...)
		err = r.Err()
	}
	return st, h, err
}

// NLMLock calls LOCK (or NM_LOCK with proc proto.NLMProcNMLock).
func (c *Client) NLMLock(proc uint32, a proto.NLM4LockArgs) (uint32, error) {
	var w proto.Writer
	a.Encode(&w)
	_, st, err := c.nlmCall(proc, w.B, a.Cookie)
	return st, err
}

// NLMCancel calls CANCEL.
func (c *Client) NLMCancel(a proto.NLM4CancArgs) (uint32, error) {
	var w proto.Writer
	a.Encode(&w)
	_, st, err := c.nlmCall(proto.NLMProcCancel, w.B, a.Cookie)
	return st, err
}

// NLMUnlock calls UNLOCK.
func (c *Client) NLMUnlock(cookie []byte, l proto.NLM4Lock) (uint32, error) {
	var w proto.Writer
	a := proto.NLM4UnlockArgs{Cookie: cookie, Lock: l}
	a.Encode(&w)
	_, st, err := c.nlmCall(proto.NLMProcUnlock, w.B, cookie)
	return st, err
}

// NLMShare calls SHARE (or UNSHARE with proc proto.NLMProcUnshare).
func (c *Client) NLMShare(proc uint32, a proto.NLM4ShareArgs) (uint32, error) {
	var w proto.Writer
	a.Encode(&w)
	r, st, err := c.nlmCall(proc, w.B, a.Cookie)
	if err == nil {
		r.Uint32() // sequence
		err = r.Err()
	}
	return st, err
}

// NLMFreeAll calls FREE_ALL: every lock of host name is released.
func (c *Client) NLMFreeAll(name string, state int32) error {
	var w proto.Writer
	a := proto.NLM4Notify{Name: name, State: state}
	a.Encode(&w)
	_, err := c.Call(proto.ProgNLM, proto.NLMVersion, proto.NLMProcFreeAll, w.B)
	return err
}

// nlmCall makes an NLM call whose reply starts with the cookie and an
// nlm4_stats, and checks that the cookie came back.
func (c *Client) nlmCall(proc uint32, args, cookie []byte) (*proto.Reader, uint32, error) {
	res, err := c.Call(proto.ProgNLM, proto.NLMVersion, proc, args)
	if err != nil {
		return nil, 0, err
	}
	r := proto.NewReader(res)
	got := r.Opaque(proto.NLMMaxNetobj)
	st := r.Uint32()
	if r.Err() != nil {
		return nil, 0, r.Err()
	}
	if string(got) != string(cookie) {
		return nil, 0, fmt.Errorf("nlm: reply cookie %x, want %x", got, cookie)
	}
	return r, st, nil
}

// NSMStat calls STAT for host name: the result (proto.NSMStatSucc or
// NSMStatFail) and the server's state number.
func (c *Client) NSMStat(name string) (res uint32, state int32, err error) {
	var w proto.Writer
	w.String(name)
	return c.nsmStatRes(proto.NSMProcStat, w.B)
}

// NSMMon calls MON.
func (c *Client) NSMMon(m proto.NSMMon) (res uint32, state int32, err error) {
	var w proto.Writer
	m.Encode(&w)
	return c.nsmStatRes(proto.NSMProcMon, w.B)
}

// NSMUnmon calls UNMON and returns the server's state number.
func (c *Client) NSMUnmon(name string, id proto.NSMMyID) (int32, error) {
	var w proto.Writer
	w.String(name)
	id.Encode(&w)
	return c.nsmState(proto.NSMProcUnmon, w.B)
}

// NSMUnmonAll calls UNMON_ALL and returns the server's state number.
func (c *Client) NSMUnmonAll(id proto.NSMMyID) (int32, error) {
	var w proto.Writer
	id.Encode(&w)
	return c.nsmState(proto.NSMProcUnmonAll, w.B)
}

// NSMSimuCrash calls SIMU_CRASH.
func (c *Client) NSMSimuCrash() error {
	_, err := c.Call(proto.ProgNSM, proto.NSMVersion, proto.NSMProcSimuCrash, nil)
	return err
}

// NSMNotify calls NOTIFY: host name rebooted and has state number state.
func (c *Client) NSMNotify(name string, state int32) error {
	var w proto.Writer
	a := proto.NSMStatChge{MonName: name, State: state}
	a.Encode(&w)
	_, err := c.Call(proto.ProgNSM, proto.NSMVersion, proto.NSMProcNotify, w.B)
	return err
}

func (c *Client) nsmStatRes(proc uint32, args []byte) (uint32, int32, error) {
	res, err := c.Call(proto.ProgNSM, proto.NSMVersion, proc, args)
	if err != nil {
		return 0, 0, err
	}
	r := proto.NewReader(res)
	st := r.Uint32()
	state := int32(r.Uint32())
	return st, state, r.Err()
}

func (c *Client) nsmState(proc uint32, args []byte) (int32, error) {
	res, err := c.Call(proto.ProgNSM, proto.NSMVersion, proc, args)
	if err != nil {
		return 0, err
	}
	r := proto.NewReader(res)
	state := int32(r.Uint32())
	return state, r.Err()
}
