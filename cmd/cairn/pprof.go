package main

import (
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with --pprof

	"github.com/spf13/pflag"
)

// pprofFlag registers --pprof, the address of Go's profiling endpoints.
func pprofFlag(f *pflag.FlagSet, addr *string) {
	f.StringVar(addr, "pprof", "", "serve Go profiling endpoints (net/http/pprof) on this address, e.g. 127.0.0.1:6060")
}

// servePprof serves net/http/pprof's endpoints on addr, if set, for the
// life of the process.
func servePprof(addr string, log *slog.Logger) {
	if addr == "" {
		return
	}
	go func() {
		if err := http.ListenAndServe(addr, nil); err != nil {
			log.Warn("pprof listener", "err", err)
		}
	}()
}
