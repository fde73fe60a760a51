package pebble

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/kv"
)

// ErrNotExist is returned, wrapped, by Open with Options.MustExist when
// its directory holds no Pebble database, or does not exist.
var ErrNotExist = kv.ErrNotExist

// Exists reports whether directory path holds a Pebble database. It only
// reads: it creates, locks and changes nothing, and a database another
// process holds counts as one. A missing directory, or a file, holds none.
func Exists(path string) (bool, error) {
	desc, err := pebble.Peek(path, vfs.Default)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("metadata at %s: %w", path, err)
	}
	return desc.Exists, nil
}

// mustExist is Open's check of Options.MustExist, before it creates
// anything.
func mustExist(path string) error {
	ok, err := Exists(path)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("metadata at %s: %w", path, ErrNotExist)
	}
	return nil
}
