package main

import (
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/hanwen/go-fuse/v2/fuse"
	_ "github.com/spf13/cobra"
)

func main() {}
