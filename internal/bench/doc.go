// Package bench runs Cairn's benchmark workloads (sequential write and
// read, create, stat, unlink) against a target — a mounted directory
// through plain system calls, or an NFSv3 server through nfsclient — and
// computes, for every workload, the five figures of the classic NFSv3/v4
// study: client CPU µs per op, server CPU µs per op, ops/s, latency (mean
// and p99), and backend operations per client operation.
//
// It is a client: it knows nothing of Cairn's internals (no vfs, meta,
// chunk, daemon). What it knows of a server comes from outside: the
// server's process id (/proc/PID/stat) and, for a Cairn server, its
// Prometheus /metrics endpoint. It never stops or signals any process.
package bench
