package nfs

// The portmapper (RFC 1833, program 100000 version 2), so that NFS
// clients find the gateway without being given its ports: a Linux client's
// mount -t nfs host:/ asks the portmapper on port 111 for the ports of
// MOUNT and NFS. With Options.PortmapPort set the server answers PMAP calls
// on every listener it serves, and on the datagram sockets given to
// ServePortmapUDP: GETPORT of NFS 3, MOUNT 3, NLM 4 and NSM 1 over TCP
// gives that port, of NSM 1 over UDP port 111 (ServePortmapUDP serves it),
// and programs registered by processes of this host (SET and UNSET, from
// the loopback only; another gateway's NFS replaces this one's) are kept
// and given out too, as rpcbind does.

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// Portmapper program, version and procedures (RFC 1833).
const (
	ProgPortmap     = 100000
	PortmapVers     = 2
	pmapProcNull    = 0
	pmapProcSet     = 1
	pmapProcUnset   = 2
	pmapProcGetPort = 3
	pmapProcDump    = 4
	// IPProtoTCP and IPProtoUDP are the protocols of a mapping.
	IPProtoTCP = 6
	IPProtoUDP = 17
)

// pmapMapping is one entry of the portmapper's table.
type pmapMapping struct{ prog, vers, prot uint32 }

// portmap is the table of a server that answers PMAP calls: its own NFS,
// MOUNT, NLM and NSM, and what local processes registered.
type portmap struct {
	mu    sync.Mutex
	ports map[pmapMapping]uint32
}

func newPortmap(port uint16) *portmap {
	p := &portmap{ports: map[pmapMapping]uint32{}}
	for _, m := range []pmapMapping{{proto.ProgNFS, proto.NFSVersion, IPProtoTCP}, {proto.ProgMount, proto.MountVers3, IPProtoTCP},
		{proto.ProgNLM, proto.NLMVersion, IPProtoTCP}, {proto.ProgNSM, proto.NSMVersion, IPProtoTCP}} {
		p.ports[m] = uint32(port)
	}
	p.ports[pmapMapping{ProgPortmap, PortmapVers, IPProtoTCP}] = 111
	p.ports[pmapMapping{ProgPortmap, PortmapVers, IPProtoUDP}] = 111
	// NSM over UDP on the portmapper's datagram socket: Linux clients'
	// sm-notify sends NOTIFY over UDP only.
	p.ports[pmapMapping{proto.ProgNSM, proto.NSMVersion, IPProtoUDP}] = 111
	return p
}

// handlePortmap serves one PMAP call from remote; nil when it cannot be
// answered (the caller frames the reply).
func (s *Server) handlePortmap(remote string, call proto.Call) []byte {
	if call.Vers != PortmapVers {
		w := proto.NewReply(call.Xid, proto.ProgMismatch)
		w.Uint32(PortmapVers)
		w.Uint32(PortmapVers)
		return w.B
	}
	w := proto.NewReply(call.Xid, proto.Success)
	args := proto.NewReader(call.Args)
	mapping := func() (pmapMapping, uint32) {
		m := pmapMapping{args.Uint32(), args.Uint32(), args.Uint32()}
		return m, args.Uint32()
	}
	p := s.pmap
	switch call.Proc {
	case pmapProcNull:
	case pmapProcGetPort:
		m, _ := mapping()
		if args.Err() != nil {
			return proto.NewReply(call.Xid, proto.GarbageArgs).B
		}
		p.mu.Lock()
		w.Uint32(p.ports[m]) // 0: not registered
		p.mu.Unlock()
	case pmapProcSet, pmapProcUnset:
		m, port := mapping()
		if args.Err() != nil {
			return proto.NewReply(call.Xid, proto.GarbageArgs).B
		}
		ok := loopback(remote) && m.prog != ProgPortmap
		p.mu.Lock()
		switch {
		case !ok:
		case call.Proc == pmapProcUnset:
			// UNSET removes the program's version for every protocol.
			for k := range p.ports {
				if k.prog == m.prog && k.vers == m.vers {
					delete(p.ports, k)
				}
			}
		case p.ports[m] != 0:
			ok = false // SET of a mapping someone holds: refused
		default:
			p.ports[m] = port
		}
		p.mu.Unlock()
		w.Bool(ok)
	case pmapProcDump:
		p.mu.Lock()
		ms := make([]pmapMapping, 0, len(p.ports))
		for m := range p.ports {
			ms = append(ms, m)
		}
		sort.Slice(ms, func(i, j int) bool {
			a, b := ms[i], ms[j]
			return a.prog < b.prog || a.prog == b.prog && (a.vers < b.vers || a.vers == b.vers && a.prot < b.prot)
		})
		for _, m := range ms {
			w.Bool(true)
			w.Uint32(m.prog)
			w.Uint32(m.vers)
			w.Uint32(m.prot)
			w.Uint32(p.ports[m])
		}
		p.mu.Unlock()
		w.Bool(false)
	default:
		return proto.NewReply(call.Xid, proto.ProcUnavail).B
	}
	return w.B
}

// loopback reports whether remote (host:port) is on this host's loopback.
func loopback(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// ServePortmapUDP answers the PMAP calls that come as datagrams on pc
// (clients ask the portmapper over UDP as often as over TCP), and NSM
// calls (a rebooted Linux client's sm-notify sends NOTIFY over UDP only),
// until the server closes or pc fails. Other programs are not served over
// UDP.
func (s *Server) ServePortmapUDP(pc net.PacketConn) error {
	if s.pmap == nil {
		return fmt.Errorf("nfs: ServePortmapUDP without Options.PortmapPort")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("nfs: server closed")
	}
	s.packetConns[pc] = true
	s.mu.Unlock()
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			select {
			case <-s.stop:
				return nil
			default:
				return err
			}
		}
		call, err := proto.ParseCall(buf[:n])
		if err != nil || !call.Valid {
			continue
		}
		var reply []byte
		switch call.Prog {
		case ProgPortmap:
			reply = s.handlePortmap(addr.String(), call)
		case proto.ProgNSM:
			reply = s.handleCall(addr.String(), s.opts.Export.allows(addr), call)
		default:
			reply = proto.NewReply(call.Xid, proto.ProgUnavail).B
		}
		if reply == nil {
			continue
		}
		// A datagram carries no record mark (the reply buffers keep
		// room for one at their start).
		_, _ = pc.WriteTo(reply[4:], addr)
	}
}

// RegisterPortmap registers NFS 3 and MOUNT 3 over TCP at port with the
// portmapper at addr (a host's rpcbind on 127.0.0.1:111), so that its
// clients find them, and NLM 4 and NSM 1 too where they are free; the
// returned function takes back what was registered. skipped lists the
// lock programs another server holds (the host's own lockd or rpc.statd,
// often): clients that find those send their locks there, not to this
// gateway, and must mount with nolock. An error says no portmapper
// answered there, or another server has NFS or MOUNT registered (which is
// not replaced).
func RegisterPortmap(addr string, port uint16) (unregister func(), skipped []string, err error) {
	c, err := nfsclient.Dial(addr)
	if err != nil {
		return nil, nil, err
	}
	c.Timeout = 2 * time.Second // a portmapper that does not answer
	call := func(proc uint32, prog, vers uint32) (bool, error) {
		w := &proto.Writer{}
		w.Uint32(prog)
		w.Uint32(vers)
		w.Uint32(IPProtoTCP)
		w.Uint32(uint32(port))
		res, err := c.Call(ProgPortmap, PortmapVers, proc, w.B)
		if err != nil {
			return false, err
		}
		r := proto.NewReader(res)
		ok := r.Bool()
		return ok, r.Err()
	}
	progs := []struct {
		prog, vers uint32
		name       string
		optional   bool
	}{
		{proto.ProgNFS, proto.NFSVersion, "NFS 3", false},
		{proto.ProgMount, proto.MountVers3, "MOUNT 3", false},
		{proto.ProgNLM, proto.NLMVersion, "NLM 4", true},
		{proto.ProgNSM, proto.NSMVersion, "NSM 1", true},
	}
	var done [][2]uint32
	unregister = func() {
		for _, p := range done {
			_, _ = call(pmapProcUnset, p[0], p[1])
		}
		c.Close()
	}
	for _, p := range progs {
		ok, err := call(pmapProcSet, p.prog, p.vers)
		if err == nil && !ok && p.optional {
			skipped = append(skipped, p.name)
			continue
		}
		if err == nil && !ok {
			// Another NFS server holds it, or an earlier process that did
			// not take it back: not ours to replace.
			err = fmt.Errorf("the portmapper at %s has program %d version %d registered already (rpcinfo -p shows by whom; rpcinfo -d %d %d removes it)",
				addr, p.prog, p.vers, p.prog, p.vers)
		}
		if err != nil {
			unregister()
			return nil, nil, err
		}
		done = append(done, [2]uint32{p.prog, p.vers})
	}
	return unregister, skipped, nil
}
