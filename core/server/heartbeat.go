package server

import "time"

// StreamHeartbeat is how often a replica heartbeats on an agent's stream:
// a third of the server timeout the agent announced in its Hello, so that
// two heartbeats may be late before the agent leaves; never more often than
// the replica's own heartbeat (Options.Heartbeat), which an agent that
// announces none (older agents) gets.
func StreamHeartbeat(configured, announced time.Duration) time.Duration {
	return max(configured, announced/3)
}
