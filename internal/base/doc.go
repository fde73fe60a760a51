// Package base holds the leaf vocabulary shared by every layer of Cairn:
// inode numbers, file types, attributes, the sentinel errors that the
// metadata and data layers return, and the vocabulary of requests that the
// front ends pass through vfs to meta (request.go). It imports nothing of Cairn's and must
// stay free of behaviour: no I/O, no logging, no policy.
package base
