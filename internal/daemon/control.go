package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The control socket lets admin commands reach a volume whose embedded
// store is held by a mount process. Protocol: the client sends one JSON
// Request line; the server answers with JSON reply lines: {"out": text}
// chunks of the command's output, then one final {"done": true, "err":
// message}.

// Request is one admin request.
type Request struct {
	Verb  string            `json:"verb"`
	Args  []string          `json:"args,omitempty"`
	Flags map[string]string `json:"flags,omitempty"`
}

type reply struct {
	Out string `json:"out,omitempty"`
	// Data is output that is not UTF-8 text (a dump, names printed by
	// find -print0): a JSON string would replace its invalid bytes.
	Data []byte `json:"data,omitempty"`
	Done bool   `json:"done,omitempty"`
	Err  string `json:"err,omitempty"`
	// Problems: Err is ErrProblems (fsck found some), not a failure to
	// run the command.
	Problems bool `json:"problems,omitempty"`
	// BadInput: Err wraps ErrBadInput (the request was wrong).
	BadInput bool `json:"bad_input,omitempty"`
}

// Holder describes the process serving a control socket.
type Holder struct {
	Pid        int    `json:"pid"`
	Host       string `json:"host"`
	MountPoint string `json:"mount_point"`
}

// AdminFunc runs an admin verb against an open volume, writing its output
// to w.
type AdminFunc func(ctx context.Context, v *Volume, req Request, w io.Writer) error

// ControlServer serves admin requests for an open volume.
type ControlServer struct {
	ln     net.Listener
	path   string
	own    os.FileInfo // the socket file this server made (nil if unknown)
	vol    *Volume
	holder Holder
	run    AdminFunc
	log    *slog.Logger
	wg     sync.WaitGroup
}

// ServeControl listens on the volume's control socket. A stale socket
// file (from a process that died) is replaced; we hold the store lock, so
// nobody else can be serving it.
func ServeControl(vol *Volume, holder Holder, run AdminFunc) (*ControlServer, error) {
	return ServeControlAt(vol.Loc.SocketPath(), vol, holder, run)
}

// ServeControlAt is ServeControl on another socket path (see
// MountSocketPath); its directory is created (mode 0700) if missing.
func ServeControlAt(path string, vol *Volume, holder Holder, run AdminFunc) (*ControlServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	// Close removes the socket file only while it is still this one: a
	// mount process that ends after its mount point was unmounted and
	// mounted again must not remove the new process's socket.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	own, _ := os.Lstat(path)
	s := &ControlServer{ln: ln, path: path, own: own, vol: vol, holder: holder, run: run, log: vol.Log}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *ControlServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.serve(c)
		}()
	}
}

type replyWriter struct {
	enc *json.Encoder
	mu  sync.Mutex
}

func (w *replyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := reply{Out: string(p)}
	if !utf8.Valid(p) {
		r = reply{Data: p}
	}
	if err := w.enc.Encode(r); err != nil {
		return 0, err
	}
	return len(p), nil
}

// binaryWriter returns a writer whose bytes travel as reply.Data through
// a control socket even when they happen to be valid UTF-8 (so that a
// client can tell them from the command's text, see SplitOutput); w
// itself when w is not a control socket's.
func binaryWriter(w io.Writer) io.Writer {
	if rw, ok := w.(*replyWriter); ok {
		return dataWriter{rw}
	}
	return w
}

type dataWriter struct{ *replyWriter }

func (w dataWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(reply{Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// SplitOutput, given to CallControl as its writer, separates a command's
// binary output (a dump) from its text (the summary).
type SplitOutput struct {
	Data, Text io.Writer
}

// Write is for text.
func (s *SplitOutput) Write(p []byte) (int, error) { return s.Text.Write(p) }

func (s *ControlServer) serve(c net.Conn) {
	var req Request
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
		return
	}
	enc := json.NewEncoder(c)
	if req.Verb == "holder" {
		b, _ := json.Marshal(s.holder)
		_ = enc.Encode(reply{Out: string(b)})
		_ = enc.Encode(reply{Done: true})
		return
	}
	w := &replyWriter{enc: enc}
	err := s.run(context.Background(), s.vol, req, w)
	r := reply{Done: true}
	if err != nil {
		r.Err = err.Error()
		r.Problems = errors.Is(err, ErrProblems)
		r.BadInput = errors.Is(err, ErrBadInput)
	}
	w.mu.Lock()
	_ = enc.Encode(r)
	w.mu.Unlock()
}

// Close stops serving and removes the socket, unless another server has
// replaced it at the same path meanwhile.
func (s *ControlServer) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	if cur, serr := os.Lstat(s.path); serr == nil && s.own != nil && os.SameFile(cur, s.own) {
		_ = os.Remove(s.path)
	}
	return err
}

// CallControl sends req to the process holding loc and copies its output
// to w. An error the command reported comes back as an error.
func CallControl(loc MetaLocation, req Request, w io.Writer) error {
	c, err := net.DialTimeout("unix", loc.SocketPath(), 5*time.Second)
	if err != nil {
		return fmt.Errorf("cannot reach the process holding %s through %s: %w", loc.Display(), loc.SocketPath(), err)
	}
	return callControl(c, loc.SocketPath(), req, w)
}

// CallSocket is CallControl on the socket at path (see MountSocketPath).
func CallSocket(path string, req Request, w io.Writer) error {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return err
	}
	return callControl(c, path, req, w)
}

func callControl(c net.Conn, path string, req Request, w io.Writer) error {
	defer c.Close()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	text, data := w, w
	if so, ok := w.(*SplitOutput); ok {
		text, data = so.Text, so.Data
	}
	dec := json.NewDecoder(bufio.NewReader(c))
	for {
		var r reply
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("control socket %s: connection lost before the command finished: %w", path, err)
		}
		if r.Out != "" {
			if _, err := io.WriteString(text, r.Out); err != nil {
				return err
			}
		}
		if len(r.Data) > 0 {
			if _, err := data.Write(r.Data); err != nil {
				return err
			}
		}
		if r.Done {
			if r.Problems {
				return ErrProblems
			}
			if r.BadInput {
				return &inputError{msg: r.Err}
			}
			if r.Err != "" {
				return errors.New(r.Err)
			}
			return nil
		}
	}
}

// QueryHolder asks the process behind loc's socket who it is.
func QueryHolder(loc MetaLocation) (Holder, error) {
	return queryHolder(func(req Request, w io.Writer) error { return CallControl(loc, req, w) })
}

// QueryMountHolder asks the process serving mount point mp, through its
// own socket (MountSocketPath), who it is. Every mount has that socket,
// shared volumes' included; only embedded ones have the volume's.
func QueryMountHolder(mp string) (Holder, error) {
	return queryHolder(func(req Request, w io.Writer) error { return CallSocket(MountSocketPath(mp), req, w) })
}

// queryHolder sends the "holder" request through call and decodes the
// answer.
func queryHolder(call func(Request, io.Writer) error) (Holder, error) {
	var out strings.Builder
	if err := call(Request{Verb: "holder"}, &out); err != nil {
		return Holder{}, err
	}
	var h Holder
	err := json.Unmarshal([]byte(out.String()), &h)
	return h, err
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
