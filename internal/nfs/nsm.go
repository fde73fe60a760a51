package nfs

// The Network Status Monitor, version 1 (program 100024), the part of it
// NFS clients' lock managers need from a server: NOTIFY, by which a
// client's statd says its host rebooted, so the gateway drops the locks
// that host held. MON, UNMON and UNMON_ALL are recorded and answered as
// statd answers them, but the gateway never calls anyone back: it has no
// lock manager of its own that a monitored host's reboot would concern.
// It sends no NOTIFY either when it starts (clients learn nothing of a
// gateway restart; see nlm.go on reclaims). The state number is odd while
// the gateway runs and larger at every start (newLockManager). NSM is
// served over TCP on the gateway's port and, when the gateway is the
// portmapper, over UDP on its datagram socket (ServePortmapUDP), where
// Linux's sm-notify sends NOTIFY.
//
// A client outside the export's allowed networks can ask for the state
// (STAT) and nothing else: MON answers stat_fail, the others change
// nothing.

import (
	"context"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

var nsmProcs = []procedure{
	proto.NSMProcNull:      nsmNull,
	proto.NSMProcStat:      nsmStat,
	proto.NSMProcMon:       nsmMon,
	proto.NSMProcUnmon:     nsmUnmon,
	proto.NSMProcUnmonAll:  nsmUnmonAll,
	proto.NSMProcSimuCrash: nsmSimuCrash,
	proto.NSMProcNotify:    nsmNotify,
}

func nsmNull(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return true
}

func (lm *lockManager) nsmState() int32 {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return lm.state
}

// nsmStat answers sm_stat_res: the gateway can monitor any host.
func nsmStat(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	args.String(proto.NSMMaxStr) // sm_name
	if args.Err() != nil {
		return false
	}
	w.Uint32(proto.NSMStatSucc)
	w.Uint32(uint32(s.locks.nsmState()))
	return true
}

func nsmMon(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var m proto.NSMMon
	if m.Decode(args); args.Err() != nil {
		return false
	}
	lm := s.locks
	res := uint32(proto.NSMStatSucc)
	lm.mu.Lock()
	if req.allowed {
		host := hostKey(m.MonName)
		if lm.monitors[host] == nil {
			lm.monitors[host] = map[proto.NSMMyID]bool{}
		}
		lm.monitors[host][m.MyID] = true
	} else {
		res = proto.NSMStatFail
	}
	state := lm.state
	lm.mu.Unlock()
	w.Uint32(res)
	w.Uint32(uint32(state))
	return true
}

func nsmUnmon(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	name := args.String(proto.NSMMaxStr)
	var id proto.NSMMyID
	if id.Decode(args); args.Err() != nil {
		return false
	}
	lm := s.locks
	lm.mu.Lock()
	if req.allowed {
		host := hostKey(name)
		delete(lm.monitors[host], id)
		if len(lm.monitors[host]) == 0 {
			delete(lm.monitors, host)
		}
	}
	state := lm.state
	lm.mu.Unlock()
	w.Uint32(uint32(state)) // sm_stat
	return true
}

func nsmUnmonAll(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var id proto.NSMMyID
	if id.Decode(args); args.Err() != nil {
		return false
	}
	lm := s.locks
	lm.mu.Lock()
	if req.allowed {
		for host, ids := range lm.monitors {
			delete(ids, id)
			if len(ids) == 0 {
				delete(lm.monitors, host)
			}
		}
	}
	state := lm.state
	lm.mu.Unlock()
	w.Uint32(uint32(state))
	return true
}

// nsmSimuCrash, from this host only (statd takes it from root on the
// host), acts as a restart of the monitor: a new state number and no
// monitored hosts. The locks stay: the gateway did not restart, and no
// client would reclaim them.
func nsmSimuCrash(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	if req.allowed && loopback(req.remote) {
		lm := s.locks
		lm.mu.Lock()
		lm.state += 2
		clear(lm.monitors)
		lm.mu.Unlock()
	}
	return true
}

// nsmNotify: mon_name rebooted, so it holds no locks any more. The name is
// the one its lock manager sent as caller_name (a Linux client's host
// name), matched without regard to case; anyone who can reach the gateway
// can send it, as with every NFSv3 server (the export's allowed networks
// are the protection).
func nsmNotify(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NSMStatChge
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if req.allowed {
		s.log.Info("nfs: a client host rebooted: releasing its locks", "host", a.MonName, "state", a.State, "remote", req.remote)
		s.locks.freeHost(ctx, a.MonName, a.State)
	}
	return true
}
