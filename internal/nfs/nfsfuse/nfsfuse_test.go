package nfsfuse

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// The bridge is tested through a mount of the gateway in package nfs
// (TestFstestThroughGateway, TestBridgeHidesOpenFiles); here are the
// conversions alone.

func TestErrno(t *testing.T) {
	tests := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{nfsclient.StatusError(proto.NFS3ErrNoEnt), syscall.ENOENT},
		{fmt.Errorf("lookup: %w", nfsclient.StatusError(proto.NFS3ErrNotEmpty)), syscall.ENOTEMPTY},
		{nfsclient.StatusError(proto.NFS3ErrStale), syscall.ESTALE},
		{nfsclient.StatusError(proto.NFS3ErrBadHandle), syscall.ESTALE},
		{nfsclient.StatusError(proto.NFS3ErrNotSupp), syscall.ENOTSUP},
		{nfsclient.StatusError(proto.NFS3ErrDQuot), syscall.EDQUOT},
		{nfsclient.StatusError(proto.NFS3ErrJukebox), syscall.EAGAIN},
		{nfsclient.StatusError(proto.NFS3ErrServerFault), syscall.EIO},
		{nfsclient.StatusError(12345), syscall.EIO},
		{fmt.Errorf("%w: EOF", nfsclient.ErrClosed), syscall.EIO},
		{os.ErrDeadlineExceeded, syscall.EIO},
		{errors.New("rpc: not a reply"), syscall.EIO},
	}
	for _, tc := range tests {
		if got := errno(tc.err); got != tc.want {
			t.Errorf("errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestTimeHow(t *testing.T) {
	const set, now = 1, 2
	tests := []struct {
		valid uint32
		sec   uint64
		how   uint32
		e     syscall.Errno
	}{
		{0, 5, proto.DontChange, 0},
		{set, 5, proto.SetToClientTime, 0},
		{set | now, 5, proto.SetToServerTime, 0},
		{set, 1 << 32, 0, syscall.EINVAL},
		{set, ^uint64(0), 0, syscall.EINVAL}, // before 1970
	}
	for _, tc := range tests {
		how, tm, e := timeHow(tc.valid, set, now, tc.sec, 7)
		if how != tc.how || e != tc.e || how == proto.SetToClientTime && tm != (proto.Time{Sec: uint32(tc.sec), Nsec: 7}) {
			t.Errorf("timeHow(%d, %d) = %d %v %v, want %d %v", tc.valid, tc.sec, how, tm, e, tc.how, tc.e)
		}
	}
}
