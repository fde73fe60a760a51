package daemon

import (
	"fmt"
	"net"
	"os"
)

// SdNotify sends state (newline-separated KEY=VALUE assignments, e.g.
// "READY=1") to the service manager that started this process, as
// systemd's sd_notify does: a datagram to the unix socket NOTIFY_SOCKET
// names ("@name" is in the abstract namespace). Without NOTIFY_SOCKET it
// does nothing: the process was not started by a manager that listens.
func SdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return nil
}
