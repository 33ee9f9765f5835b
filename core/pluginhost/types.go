package pluginhost

import (
	"context"
	"errors"

	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// ErrNeedFull is returned by Translate when the translator lost its view of
// the fleet since the last successful call (the plugin was restarted, or a
// session broke) and the update is not Full. The caller resends everything
// with Full set.
var ErrNeedFull = errors.New("translator needs a full update")

// ErrPluginFailed is wrapped by the error Translate returns when the plugin
// answered but could not translate (its Translate returned an error). The
// session stays usable: the next update may be a delta.
var ErrPluginFailed = host.ErrPluginFailed

// Translator is the method set the engine uses, satisfied by *Plugin (a
// plugin process) and *Linked (a translator running in the host process).
type Translator interface {
	// Name returns the plugin's name.
	Name() string
	// Backends returns the backends the plugin produces outputs for.
	Backends() []string
	// Meshes returns those of the backends the plugin declares need their
	// mesh: they have work only in clusters where discovery found a mesh
	// of the same name.
	Meshes() []string
	// InputKinds returns the kinds the plugin declares it reads, as
	// "group/Kind": the server sends their union to the agents, which
	// discover the custom resources of those kinds.
	InputKinds() []string
	// OutputKinds returns the kinds the plugin declares it emits, as
	// "group/Kind": the server sends them to the agents, which prune by
	// them.
	OutputKinds() []string
	// Translate sends an update and returns the outputs that changed and
	// every current diagnostic. It returns ErrNeedFull (nothing was sent)
	// when the update must be resent in full; an error wrapping
	// ErrPluginFailed when the plugin could not translate; any other error
	// when the plugin broke, in which case the next call needs a full update.
	Translate(ctx context.Context, u Update) (Result, error)
}

// The types of the translator protocol's host side, which
// sdk/protocol/host defines so that sdk/sdktest drives the same code.
type (
	// Update is one change of the fleet view sent to a translator.
	Update = host.Update
	// ClusterUpdate is the change of one cluster's inputs.
	ClusterUpdate = host.ClusterUpdate
	// Result is a translator's answer to one update.
	Result = host.Result
	// ClusterOutput is the complete set of resources of one backend in
	// one cluster.
	ClusterOutput = host.ClusterOutput
)
