// Package nfs is Cairn's NFS gateway: NFSv3 and MOUNTv3 (RFC 1813), and
// the lock manager NLMv4 with the status monitor NSMv1 (nlm.go, nsm.go),
// over ONC RPC on TCP (RFC 5531), all programs on one port, translating
// every procedure into calls of package vfs. It owns the RPC connections, the
// file handle format (handle.go), the conversion of vfs errors into NFS
// statuses (errors.go), and two small caches that make a stateless
// protocol efficient over vfs's open handles: open files for READ and
// WRITE (files.go) and directory listings in progress (dir.go).
//
// It must not make semantic decisions: permissions, namespace rules and
// durability are vfs's and meta's. Callers are the AUTH_SYS identity of
// each request (AUTH_NONE is the anonymous user), passed to vfs with
// KernelChecked false so that meta checks permissions.
//
// Wire formats live in the subpackage proto, shared with the test client
// nfsclient.
package nfs
