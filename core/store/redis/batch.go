package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
)

// Batch queues writes and sends them to Redis in one round trip (a
// pipeline) when Exec is called. Each write is the one the Store method of
// the same name makes: the same checks, the same Lua script and the same
// change-feed event, so a Batch changes how many round trips writing costs,
// not what is written. Writes are not atomic together: each script is, as
// it is alone. A Batch is for filling a store in bulk (meshrelay bench
// --cold-start); it is not safe for concurrent use.
type Batch struct {
	s      *Store
	pipe   goredis.Pipeliner
	errs   []error
	writes []batchWrite
}

// batchWrite is a queued write's reply and what Exec reports it as.
type batchWrite struct {
	op  string
	cmd goredis.Cmder
}

// Batch returns an empty batch of writes to this store.
func (s *Store) Batch() *Batch {
	return &Batch{s: s, pipe: s.client.Pipeline()}
}

// PutCluster queues store.Registry's PutCluster.
func (b *Batch) PutCluster(c store.Cluster) {
	args, err := b.s.putClusterArgs(c)
	b.queue(fmt.Sprintf("put cluster %q", c.Name), b.s.scripts.putField, []string{b.s.keys.clusters()}, args, err)
}

// PutInput queues store.Inputs' PutInput, its index entry first as there.
func (b *Batch) PutInput(cluster string, snap *snapshot.Snapshot) {
	op := fmt.Sprintf("put input %q", cluster)
	args, err := b.s.putInputArgs(cluster, nil, snap)
	if err == nil {
		b.writes = append(b.writes, batchWrite{op: op, cmd: b.pipe.SAdd(context.Background(), b.s.keys.inputs(), cluster)})
	}
	b.queue(op, b.s.scripts.putInput, []string{b.s.keys.input(cluster)}, args, err)
}

// PutOutput queues store.Outputs' PutOutput.
func (b *Batch) PutOutput(cluster, backend string, snap *snapshot.Snapshot) {
	args, err := b.s.putOutputArgs(cluster, backend, snap)
	b.queue(fmt.Sprintf("put output %q/%q", cluster, backend), b.s.scripts.putOutput, []string{b.s.keys.output(cluster)}, args, err)
}

// queue adds a script call to the pipeline, or the error that stopped it.
func (b *Batch) queue(op string, script *goredis.Script, keys []string, args []any, err error) {
	if err != nil {
		b.errs = append(b.errs, err)
		return
	}
	// EVALSHA: Exec loads the scripts first, since a pipeline cannot fall
	// back to EVAL when Redis does not know one.
	b.writes = append(b.writes, batchWrite{op: op, cmd: script.EvalSha(context.Background(), b.pipe, keys, args...)})
}

// Exec sends the queued writes and returns every write's error, joined: a
// write that failed its checks was not sent, the others were.
func (b *Batch) Exec(ctx context.Context) error {
	if err := b.s.check(); err != nil {
		return err
	}
	defer func() { b.pipe, b.writes, b.errs = b.s.client.Pipeline(), nil, nil }()
	if len(b.writes) > 0 {
		for _, sc := range []*goredis.Script{b.s.scripts.putField, b.s.scripts.putInput, b.s.scripts.putOutput} {
			if err := sc.Load(ctx, b.s.client).Err(); err != nil {
				return b.s.wrap("load scripts", err)
			}
		}
		// Each reply's error is read below; Exec's is the first of them.
		_, _ = b.pipe.Exec(ctx)
	}
	errs := b.errs
	for _, w := range b.writes {
		if err := w.cmd.Err(); err != nil {
			errs = append(errs, b.s.wrap(w.op, err))
		}
	}
	return errors.Join(errs...)
}
