package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/nfs"
	"github.com/cairnfs/cairn/internal/vfs"
)

// GatewayOptions configures Gateway.
type GatewayOptions struct {
	Volume VolumeOptions
	// Listen is the TCP address NFSv3 and MOUNTv3 are served on.
	Listen string
	// NFS tunes the gateway; VolumeUUID and Logger are filled in.
	NFS nfs.Options
	// Version is recorded in the session.
	Version string
	// Ready is called with the address served once the gateway accepts
	// connections.
	Ready  func(addr string)
	Logger *slog.Logger
	// Heartbeat and SessionTimeout are as in MountOptions.
	Heartbeat      time.Duration
	SessionTimeout time.Duration
}

// Validate checks the options that need no volume.
func (o *GatewayOptions) Validate() error {
	if o.Listen == "" {
		return errors.New("no address to listen on: give --listen HOST:PORT (e.g. 0.0.0.0:2049)")
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %w", o.Listen, err)
	}
	return checkSessionTimes(&o.Heartbeat, &o.SessionTimeout)
}

// nfsGateway is an NFS server over a vfs, listening.
type nfsGateway struct {
	srv  *nfs.Server
	addr string
	done chan error
}

// startNFS serves v over NFS on addr.
func startNFS(v *vfs.VFS, vol *Volume, addr string, o nfs.Options, log *slog.Logger) (*nfsGateway, error) {
	o.VolumeUUID = vol.Settings.UUID
	o.Logger = log
	srv, err := nfs.New(v, o)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = srv.Close(context.Background())
		return nil, fmt.Errorf("NFS gateway: %w", err)
	}
	g := &nfsGateway{srv: srv, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { g.done <- srv.Serve(l) }()
	log.Info("serving NFSv3", "addr", g.addr, "volume", vol.Settings.Name, "export", o.Export.String())
	return g, nil
}

// stop closes the gateway, committing the writes of its cached files.
func (g *nfsGateway) stop(log *slog.Logger) {
	if err := g.srv.Close(context.Background()); err != nil {
		log.Error("closing the NFS gateway", "err", err)
	}
	<-g.done
}

// Gateway opens the volume and serves it over NFSv3 until SIGINT/SIGTERM
// or ctx ends; then it commits buffered writes and closes everything.
func Gateway(ctx context.Context, o GatewayOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Volume.Logger = log
	vol, err := OpenVolume(ctx, o.Volume)
	if err != nil {
		return err
	}
	defer vol.Close()
	host, _ := os.Hostname()
	where := "nfs://" + o.Listen
	closeSession, err := openSession(ctx, vol.Meta, meta.SessionInfo{Host: host, MountPoint: where, Version: o.Version, Timeout: o.SessionTimeout}, log)
	if err != nil {
		return err
	}
	defer closeSession()
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{Logger: log, ReadOnly: o.Volume.ReadOnly, AppendAtEOF: vol.Loc.Shared()})
	g, err := startNFS(v, vol, o.Listen, o.NFS, log)
	if err != nil {
		_ = v.Close(context.Background())
		return err
	}
	if !vol.Loc.Shared() {
		ctl, err := ServeControl(vol, Holder{Pid: os.Getpid(), Host: host, MountPoint: where}, RunAdmin)
		if err != nil {
			g.stop(log)
			_ = v.Close(context.Background())
			return err
		}
		defer ctl.Close()
	}
	if o.Ready != nil {
		o.Ready(g.addr)
	}
	stopHB := startHeartbeats(vol.Meta, o.Heartbeat, o.SessionTimeout, log)
	defer stopHB()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case s := <-sigs:
		log.Info("signal: stopping the NFS gateway", "signal", s.String())
	case <-ctx.Done():
	case err := <-g.done:
		g.done <- err
		log.Error("NFS gateway stopped", "err", err)
	}
	g.stop(log)
	if err := v.Close(context.Background()); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	log.Info("clean shutdown", "addr", g.addr)
	return nil
}
