package daemon

import "testing"

func TestDiffPathQuoting(t *testing.T) {
	for _, c := range []struct {
		in     string
		quoted bool
	}{
		{"/a/b c", false},
		{"/é", false},
		{`/"q`, false},
		{"/a\nb", true},
		{"/tab\there", true},
		{"/x -> y", true},
		{`"q`, true},
		{"/trailing ", true},
		{"/\xff", true},
	} {
		out := diffPath(c.in)
		if quoted := out != c.in; quoted != c.quoted {
			t.Errorf("%q printed as %s", c.in, out)
		}
	}
}
