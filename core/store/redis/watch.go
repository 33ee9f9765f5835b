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
// lost (Redis pub/sub keeps nothing for absent subscribers). On Redis
// Cluster the subscription is kept on the primary serving the store's hash
// slot, and moved, with a Resync, when another primary serves it.
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
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		s.subscribeCluster(ctx, cc)
		return
	}
	// One server or Sentinel: go-redis reconnects the subscription on the
	// next Receive after a failure, to the primary it knows then.
	ps := s.client.Subscribe(ctx, s.keys.events())
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	defer ps.Close()
	backoff := minSubscribeBackoff
	for {
		confirmed, err := s.receive(ctx, ps)
		if ctx.Err() != nil {
			return
		}
		if confirmed {
			backoff = minSubscribeBackoff
		}
		s.lost(err)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxSubscribeBackoff)
	}
}

// Backoff between attempts to subscribe again after the change feed broke.
const (
	minSubscribeBackoff = 50 * time.Millisecond
	maxSubscribeBackoff = 2 * time.Second
)

// slotCheckEvery is how often a store on Redis Cluster checks that its
// change feed is still subscribed on the primary serving the store's slot.
const slotCheckEvery = 2 * time.Second

// subscribeCluster runs the change feed on Redis Cluster until ctx ends.
// The subscription is kept on the primary that serves the store's slot, so
// that it breaks when that primary restarts empty or fails over, and the
// watchers resync. Ordinary pub/sub reaches every node, so a subscription
// left on another node after a slot migration or failover would still
// carry events but never break with the node that holds the data. Hence
// the subscription is made through that primary's own client, found again
// after each failure, and moved, with a resync, when the slot's primary
// changes.
func (s *Store) subscribeCluster(ctx context.Context, cc *goredis.ClusterClient) {
	channel := s.keys.events()
	backoff := minSubscribeBackoff
	for {
		primary, err := cc.MasterForKey(ctx, channel)
		if err == nil {
			var confirmed, moved bool
			confirmed, moved, err = s.subscribeOn(ctx, cc, primary)
			if ctx.Err() != nil {
				return
			}
			if confirmed {
				backoff = minSubscribeBackoff
			}
			if moved {
				s.lost(nil)
				continue
			}
		}
		s.lost(err)
		cc.ReloadState(ctx)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxSubscribeBackoff)
	}
}

// subscribeOn runs one subscription on primary, the node that served the
// store's slot when it was asked, until the subscription fails, ctx ends,
// or the slot is served by another primary (moved). It reports whether
// the subscription was confirmed.
func (s *Store) subscribeOn(ctx context.Context, cc *goredis.ClusterClient, primary *goredis.Client) (confirmed, moved bool, err error) {
	addr := primary.Options().Addr
	subCtx, cancel := context.WithCancel(ctx)
	ps := primary.Subscribe(subCtx, s.keys.events())
	stop := context.AfterFunc(subCtx, func() { ps.Close() })
	defer stop()
	defer ps.Close()

	followed := make(chan bool, 1)
	go func() {
		moved := s.slotMoved(subCtx, cc, addr)
		cancel() // ends receive
		followed <- moved
	}()
	confirmed, err = s.receive(subCtx, ps)
	cancel()
	return confirmed, <-followed, err
}

// slotMoved returns true once go-redis's view of the cluster names another
// primary than addr for the store's slot, or false when ctx ends. Each
// check asks go-redis to reload its view (CLUSTER SLOTS on one node, in
// the background), since a store that only watches gets no MOVED reply
// that would reload it; the next check reads the reloaded view.
func (s *Store) slotMoved(ctx context.Context, cc *goredis.ClusterClient, addr string) bool {
	tick := time.NewTicker(slotCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if primary, err := cc.MasterForKey(ctx, s.keys.events()); err == nil && primary.Options().Addr != addr {
			s.logger.Info("change feed's slot has another primary; subscribing there, watchers will resync",
				"from", addr, "to", primary.Options().Addr)
			return true
		}
		cc.ReloadState(ctx)
	}
}

// receive hands the subscription's messages to the watchers until Receive
// fails or ctx ends, and reports whether it saw the subscription
// confirmed. Each confirmation sends store.EventResync to every watcher.
func (s *Store) receive(ctx context.Context, ps *goredis.PubSub) (confirmed bool, err error) {
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return confirmed, err
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			confirmed = true
			s.subMu.Lock()
			s.subscribed = true
			s.hub.Publish(store.Event{Kind: store.EventResync, Replica: s.replica})
			select {
			case <-s.ready:
				s.logger.Info("change feed subscribed again; watchers resync")
			default:
				close(s.ready) // only this loop closes it
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
			ev, err := e.event()
			if err != nil {
				s.logger.Warn("change feed: an input's delta is left out; the input is read whole", "cluster", e.Cluster, "err", err)
			}
			s.hub.Publish(ev)
		}
	}
}

// lost marks the subscription down, and logs err if it was up; a nil err
// is a subscription closed on purpose.
func (s *Store) lost(err error) {
	s.subMu.Lock()
	was := s.subscribed
	s.subscribed = false
	s.subMu.Unlock()
	if was && err != nil {
		s.logger.Warn("change feed lost its subscription; watchers will resync when it returns", "err", err)
	}
}

// sleep waits for d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
