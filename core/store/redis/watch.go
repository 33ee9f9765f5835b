package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
)

// subscribeWait bounds how long Watch waits for the change feed's first
// subscription. A watcher that returns before it is confirmed receives a
// Resync once it is.
const subscribeWait = 5 * time.Second

// Watch implements store.Watcher. The store holds one subscription to the
// event channel, started by the first Watch and kept until Close; messages
// from this store's own replica ID are dropped. Each time the subscription
// is (re)established after a failure, every watcher registered while it was
// down receives store.EventResync, since messages published meanwhile are
// lost (Redis pub/sub keeps nothing for absent subscribers).
func (s *Store) Watch(ctx context.Context) (<-chan store.Event, error) {
	s.subMu.Lock()
	if err := s.check(); err != nil {
		s.subMu.Unlock()
		return nil, err
	}
	if !s.subStarted {
		s.subStarted = true
		loopCtx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		go s.subscribe(loopCtx)
	}
	s.subMu.Unlock()

	timer := time.NewTimer(subscribeWait)
	defer timer.Stop()
	select {
	case <-s.ready:
	case <-timer.C:
	case <-ctx.Done():
		return nil, fmt.Errorf("redis: watch: %w", ctx.Err())
	}

	// Registering under subMu orders this watcher against the loop's
	// Resync: either the subscription is up now and nothing was missed, or
	// the Resync published at the next confirmation reaches this watcher.
	s.subMu.Lock()
	defer s.subMu.Unlock()
	return s.hub.Watch(ctx)
}

// subscribe runs the change feed until ctx ends.
func (s *Store) subscribe(ctx context.Context) {
	defer close(s.done)
	ps := s.client.Subscribe(ctx, s.keys.events())
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	defer ps.Close()

	first := true
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.subMu.Lock()
			was := s.subscribed
			s.subscribed = false
			s.subMu.Unlock()
			if was {
				s.logger.Warn("change feed lost its subscription; watchers will resync when it returns", "err", err)
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			backoff = 50 * time.Millisecond
			s.subMu.Lock()
			s.subscribed = true
			s.hub.Publish(store.Event{Kind: store.EventResync, Replica: s.replica})
			if first {
				first = false
				close(s.ready)
			} else {
				s.logger.Info("change feed subscribed again; watchers resync")
			}
			s.subMu.Unlock()
		case *goredis.Message:
			var e message
			if err := json.Unmarshal([]byte(m.Payload), &e); err != nil {
				s.logger.Warn("change feed: undecodable message", "err", err)
				continue
			}
			if e.Replica == s.replica {
				continue
			}
			s.hub.Publish(store.Event(e))
		}
	}
}
