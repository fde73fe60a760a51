package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/kv"
)

// parseSize parses sizes like 4096, 64K, 4M, 1G, 2T (binary units).
func parseSize(s string) (uint64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := uint64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		case 'P':
			mult = 1 << 50
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: want a number with an optional K/M/G/T suffix", s)
	}
	return n * mult, nil
}

// runAdmin runs an admin verb on the volume at metaURL: directly when the
// metadata engine can be opened here, else through the control socket of
// the mount process that holds it.
func runAdmin(ctx context.Context, metaURL string, req daemon.Request, w io.Writer) error {
	loc, err := daemon.ParseMetaURL(metaURL)
	if err != nil {
		return err
	}
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: metaURL, Logger: stderrLogger(slog.LevelWarn)})
	if errors.Is(err, kv.ErrLocked) {
		return daemon.CallControl(loc, req, w)
	}
	if err != nil {
		return err
	}
	defer vol.Close()
	return daemon.RunAdmin(ctx, vol, req, w)
}

func stderrLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return strings.TrimSuffix(p, "/"), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(wd+"/"+p, "/"), nil
}
