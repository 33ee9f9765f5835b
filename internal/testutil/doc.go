// Package testutil holds the waits meshrelay's tests share: polling a
// condition until it holds, waiting for a value on a channel, and
// collecting what a snapshot source publishes.
//
//	testutil.Eventually(t, "the agent connects", func() bool { return srv.Connected("east") })
//	testutil.EventuallyWhy(t, "caught up", func() (bool, string) { … return n == want, fmt.Sprint(n) })
//	v := testutil.Receive(t, "leading", ch)
//
//	c := testutil.RunSource(t, src) // src.Run(ctx, publish) until the test ends
//	s := c.WaitFor(t, "bookinfo is read", func(s *snapshot.Snapshot) bool { … })
//
// Every wait fails the test after [Timeout] (a minute: the machines that
// run the tests may be busy) with what it waited for; Eventually looks
// again after [PollInterval], then less often, up to [MaxPollInterval].
// Tests never wait a fixed time.
package testutil
