package nfs

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// getPort asks the portmapper c talks to for the port of prog/vers/prot.
func getPort(t *testing.T, c *nfsclient.Client, prog, vers, prot uint32) uint32 {
	t.Helper()
	w := &proto.Writer{}
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(prot)
	w.Uint32(0)
	res, err := c.Call(ProgPortmap, PortmapVers, pmapProcGetPort, w.B)
	if err != nil {
		t.Fatal(err)
	}
	r := proto.NewReader(res)
	port := r.Uint32()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return port
}

// TestPortmap: a gateway that is the portmapper gives its port for NFS 3
// and MOUNT 3 over TCP, and 0 for what it does not serve, over TCP and
// UDP; another gateway of the host registers with it (and takes itself
// back), as with rpcbind.
func TestPortmap(t *testing.T) {
	e := newEnvWith(t, Options{PortmapPort: 2049})
	c, _ := e.client(t)
	for _, tc := range []struct {
		prog, vers, prot, want uint32
	}{
		{proto.ProgNFS, proto.NFSVersion, IPProtoTCP, 2049},
		{proto.ProgMount, proto.MountVers3, IPProtoTCP, 2049},
		{proto.ProgNLM, proto.NLMVersion, IPProtoTCP, 2049},
		{proto.ProgNSM, proto.NSMVersion, IPProtoTCP, 2049},
		{proto.ProgNLM, 1, IPProtoTCP, 0},
		{proto.ProgNFS, proto.NFSVersion, IPProtoUDP, 0},
		{proto.ProgNFS, 4, IPProtoTCP, 0},
		{ProgPortmap, PortmapVers, IPProtoUDP, 111},
	} {
		if got := getPort(t, c, tc.prog, tc.vers, tc.prot); got != tc.want {
			t.Errorf("GETPORT %d/%d/%d = %d, want %d", tc.prog, tc.vers, tc.prot, got, tc.want)
		}
	}

	// Over UDP: one datagram each way, no record mark.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.ServePortmapUDP(pc) }()
	uc, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	w := &proto.Writer{}
	for _, v := range []uint32{77, proto.MsgCall, proto.RPCVersion, ProgPortmap, PortmapVers, pmapProcGetPort, proto.AuthNone, 0, proto.AuthNone, 0,
		proto.ProgMount, proto.MountVers3, IPProtoTCP, 0} {
		w.Uint32(v)
	}
	if _, err := uc.Write(w.B); err != nil {
		t.Fatal(err)
	}
	_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := uc.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := proto.NewReader(buf[:n])
	var got []uint32
	for r.Err() == nil && len(got) < 7 {
		got = append(got, r.Uint32())
	}
	// xid, REPLY, MSG_ACCEPTED, verifier (flavor, length), SUCCESS, port
	if len(got) != 7 || got[0] != 77 || got[5] != proto.Success || got[6] != 2049 {
		t.Fatalf("GETPORT over UDP: %v", got)
	}

	// Another gateway on this host does not replace this one's
	// registration...
	if _, _, err := RegisterPortmap(e.addr, 20490); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("RegisterPortmap over this gateway's programs: %v", err)
	}
	if got := getPort(t, c, proto.ProgNFS, proto.NFSVersion, IPProtoTCP); got != 2049 {
		t.Errorf("GETPORT after a refused registration = %d, want 2049", got)
	}
	// ...but registers once they are free, and takes itself back.
	for _, prog := range [][2]uint32{{proto.ProgNFS, proto.NFSVersion}, {proto.ProgMount, proto.MountVers3}} {
		w := &proto.Writer{}
		for _, v := range []uint32{prog[0], prog[1], IPProtoTCP, 0} {
			w.Uint32(v)
		}
		if _, err := c.Call(ProgPortmap, PortmapVers, pmapProcUnset, w.B); err != nil {
			t.Fatal(err)
		}
	}
	// The lock programs stay this gateway's: skipped, not an error.
	unregister, skipped, err := RegisterPortmap(e.addr, 20490)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(skipped, ",") != "NLM 4,NSM 1" {
		t.Errorf("skipped %q, want NLM 4 and NSM 1", skipped)
	}
	if got := getPort(t, c, proto.ProgNLM, proto.NLMVersion, IPProtoTCP); got != 2049 {
		t.Errorf("GETPORT of NLM after another gateway registered = %d, want 2049", got)
	}
	if got := getPort(t, c, proto.ProgNFS, proto.NFSVersion, IPProtoTCP); got != 20490 {
		t.Errorf("GETPORT after another gateway registered = %d, want 20490", got)
	}
	unregister()
	if got := getPort(t, c, proto.ProgMount, proto.MountVers3, IPProtoTCP); got != 0 {
		t.Errorf("GETPORT after it took itself back = %d, want 0", got)
	}
	if _, _, err := RegisterPortmap("127.0.0.1:1", 2049); err == nil {
		t.Error("RegisterPortmap with no portmapper there succeeded")
	}
}
