package pluginhost

import (
	"context"
	"sync/atomic"
	"time"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"google.golang.org/grpc"
)

// silence measures how long a plugin's Translate streams went without
// progress: a part of an update the plugin took from the host (sending
// blocks on flow control while the plugin reads), or a part of its answer
// that brings it closer to its end: output resources, the end of an
// output set, or Done. A call is bounded by its silence, not its length,
// so that a plugin that takes or answers a view of any size steadily is
// never taken as hung.
//
// Progress is finite, so a call that keeps progressing ends without an
// absolute bound: an update has as many parts as its view, and the host
// refuses an answer with a (cluster, backend) set twice or over
// Options.MaxOutputBytes. Diagnostics and empty parts that do not end a
// set, which have no such bound, are no progress.
//
// The clock starts as the host sends the call's first part: what the host
// does before (working out the update, which takes seconds for a fleet of
// 10,000 clusters on a loaded machine) is not the plugin's silence.
type silence struct {
	epoch time.Time
	// last is when progress was last made, as time since epoch, or
	// notStarted before the call's first part.
	last atomic.Int64
}

// notStarted is silence.last before a call sent its first part.
const notStarted = -1

func newSilence() *silence {
	s := &silence{epoch: time.Now()}
	s.last.Store(notStarted)
	return s
}

// sending records that a part is about to be sent: the clock starts, if
// it has not.
func (s *silence) sending() { s.last.CompareAndSwap(notStarted, int64(time.Since(s.epoch))) }

// progress records that a part went or came.
func (s *silence) progress() { s.last.Store(int64(time.Since(s.epoch))) }

// since returns how long no progress was made since the call's first part.
func (s *silence) since() time.Duration {
	last := s.last.Load()
	if last == notStarted {
		return 0
	}
	return time.Since(s.epoch) - time.Duration(last)
}

// bound returns ctx, ended with cause once the call made no progress for
// limit after it started sending. The returned function ends the context
// and the goroutine that watches it.
func (s *silence) bound(ctx context.Context, limit time.Duration, cause error) (context.Context, context.CancelFunc) {
	s.last.Store(notStarted)
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTimer(limit)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			quiet := s.since()
			if quiet >= limit {
				cancel(cause)
				return
			}
			t.Reset(limit - quiet)
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// watch returns client, whose Translate streams record their progress in s.
func (s *silence) watch(client translatorv1.TranslatorClient) translatorv1.TranslatorClient {
	return watchedClient{TranslatorClient: client, silence: s}
}

// watchedClient is a TranslatorClient whose Translate streams record
// their progress.
type watchedClient struct {
	translatorv1.TranslatorClient
	silence *silence
}

func (c watchedClient) Translate(ctx context.Context, opts ...grpc.CallOption) (translatorv1.Translator_TranslateClient, error) {
	stream, err := c.TranslatorClient.Translate(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return watchedStream{Translator_TranslateClient: stream, silence: c.silence}, nil
}

// watchedStream records every part sent and every part received that is
// progress (see silence).
type watchedStream struct {
	translatorv1.Translator_TranslateClient
	silence *silence
}

func (s watchedStream) Send(m *translatorv1.TranslateRequest) error {
	s.silence.sending()
	err := s.Translator_TranslateClient.Send(m)
	if err == nil {
		s.silence.progress()
	}
	return err
}

func (s watchedStream) Recv() (*translatorv1.TranslateResponse, error) {
	m, err := s.Translator_TranslateClient.Recv()
	if err == nil && progresses(m) {
		s.silence.progress()
	}
	return m, err
}

// progresses reports whether m brings an answer closer to its end.
func progresses(m *translatorv1.TranslateResponse) bool {
	switch m := m.GetMsg().(type) {
	case *translatorv1.TranslateResponse_Output:
		return len(m.Output.GetResources()) > 0 || !m.Output.GetMore()
	case *translatorv1.TranslateResponse_Done:
		return true
	default:
		return false
	}
}
