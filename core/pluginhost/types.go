package pluginhost

import (
	"context"

	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

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
	// Translate brings the translator to the view v and returns the
	// outputs that changed and every current diagnostic. What the
	// translator holds is its session's to know (sdk/protocol/host): it
	// sends the whole view to a new session or after a failure, and
	// otherwise what changed, or nothing (Result.Sent is false). It
	// returns an error wrapping ErrPluginFailed when the plugin could not
	// translate, and any other error when the plugin broke.
	Translate(ctx context.Context, v View) (Result, error)
}

// Sessions is a Translator that holds more than one view at a time, each
// in a session of its own with one plugin: the engine keeps one session
// per live revision of the policies. Plugin processes and in-process
// translators are Sessions.
type Sessions interface {
	Translator
	// Session returns the translator on the session named name; "" is
	// the Translator itself.
	Session(name string) Translator
	// CloseSession ends the session named name: the plugin forgets its
	// view, and a later call sends the whole view again.
	CloseSession(name string)
}

// namedSession is a Translator on one named session of a Sessions.
type namedSession struct {
	t         Translator
	name      string
	translate func(ctx context.Context, name string, v View) (Result, error)
}

func (n *namedSession) Name() string          { return n.t.Name() }
func (n *namedSession) Backends() []string    { return n.t.Backends() }
func (n *namedSession) Meshes() []string      { return n.t.Meshes() }
func (n *namedSession) InputKinds() []string  { return n.t.InputKinds() }
func (n *namedSession) OutputKinds() []string { return n.t.OutputKinds() }

func (n *namedSession) Translate(ctx context.Context, v View) (Result, error) {
	return n.translate(ctx, n.name, v)
}

// The types of the translator protocol's host side, which
// sdk/protocol/host defines so that sdk/sdktest drives the same code.
type (
	// View is the fleet a translator is to hold.
	View = host.View
	// Cluster is one cluster of a View.
	Cluster = host.Cluster
	// Result is a translator's answer to one update.
	Result = host.Result
	// ClusterOutput is the complete set of resources of one backend in
	// one cluster.
	ClusterOutput = host.ClusterOutput
)
