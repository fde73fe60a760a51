package mem_test

import (
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/objtest"
)

func TestConformance(t *testing.T) {
	objtest.Run(t, func(*testing.T) object.Store { return mem.New() })
}
