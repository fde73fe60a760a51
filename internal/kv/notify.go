package kv

import (
	"context"
	"sync"
)

// Hub fans notifications out to the subscribers of one process. memkv and
// pebble use it as their whole Notifier; shared backends deliver what they
// receive from the database through it. The zero value is ready to use and
// safe for concurrent use.
type Hub struct {
	mu   sync.Mutex
	next int
	subs map[string]map[int]chan string
}

// hubBuffer is each subscriber's buffer; notifications beyond it are
// dropped for that subscriber (waiters re-check on a timeout anyway).
const hubBuffer = 64

// Notify delivers payload to the local subscribers of channel. It never
// blocks and never fails.
func (h *Hub) Notify(_ context.Context, channel, payload string) error {
	h.Deliver(channel, payload)
	return nil
}

// Deliver hands payload to every current subscriber of channel without
// blocking.
func (h *Hub) Deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.subs[channel] {
		select {
		case c <- payload:
		default:
		}
	}
}

// Subscribe implements Notifier.Subscribe.
func (h *Hub) Subscribe(channel string) (<-chan string, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = make(map[string]map[int]chan string)
	}
	if h.subs[channel] == nil {
		h.subs[channel] = make(map[int]chan string)
	}
	id := h.next
	h.next++
	c := make(chan string, hubBuffer)
	h.subs[channel][id] = c
	var once sync.Once
	return c, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs[channel], id)
			if len(h.subs[channel]) == 0 {
				delete(h.subs, channel)
			}
		})
	}
}

// Channels lists the channels that have subscribers (for backends that must
// LISTEN on them after a reconnect).
func (h *Hub) Channels() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.subs))
	for c := range h.subs {
		out = append(out, c)
	}
	return out
}
