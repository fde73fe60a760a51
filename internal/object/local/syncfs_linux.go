package local

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func syncfs(root *os.File) error {
	rc, err := root.SyscallConn()
	if err != nil {
		return fmt.Errorf("object/local: sync: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Syncfs(int(fd))
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return fmt.Errorf("object/local: sync: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("object/local: syncfs %s: %w", root.Name(), serr)
	}
	return nil
}
