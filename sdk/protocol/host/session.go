package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// Session is the host's side of one Translate stream: it sends updates in
// parts, and checks and assembles the answers. Calls must not overlap.
type Session struct {
	plugin    string
	backends  []string
	maxOutput int

	stream     translatorv1.Translator_TranslateClient
	cancel     context.CancelFunc
	generation uint64
	// view holds the clusters the plugin knows of.
	view map[string]bool
	// holds is set once the plugin answered an update of this session: it
	// holds a view a delta applies to.
	holds bool
}

// NeedFull reports whether the next update on s must be Full: s is nil (no
// session runs), or the plugin has not answered an update of it yet. The
// session is the one place that knows what the plugin holds; hosts ask it
// before sending a delta.
func (s *Session) NeedFull() bool { return s == nil || !s.holds }

// Open starts a Translate stream on client with the plugin of that name,
// which serves backends (as it described them) and may answer at most
// maxOutput bytes of bodies per (cluster, backend) set. The stream lives
// until Close.
func Open(client translatorv1.TranslatorClient, plugin string, backends []string, maxOutput int) (*Session, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Translate(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open translate session: %w", err)
	}
	return &Session{plugin: plugin, backends: backends, maxOutput: maxOutput, stream: stream, cancel: cancel, view: map[string]bool{}}, nil
}

// Close ends the stream.
func (s *Session) Close() {
	_ = s.stream.CloseSend()
	s.cancel()
}

// Translate sends one update and returns the checked answer. Any error but
// one wrapping [ErrPluginFailed] leaves the session unusable; one wrapping
// [ErrProtocol] means the plugin answered something the host refuses.
func (s *Session) Translate(ctx context.Context, u Update) (Result, error) {
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	view := s.nextView(u)
	s.generation++
	gen := s.generation
	if err := s.send(u, gen); err != nil {
		return Result{}, fmt.Errorf("send update %d: %w", gen, s.streamErr(ctx, err))
	}
	res, err := s.receive(ctx, gen, view, u.Accepted)
	if errors.Is(err, ErrPluginFailed) {
		// The plugin applied the update though it could not translate it.
		s.view = view
	}
	if err != nil {
		return Result{}, err
	}
	s.view, s.holds = view, true
	return res, nil
}

// streamErr prefers the call's own context error to the transport's echo of it.
func (s *Session) streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func (s *Session) nextView(u Update) map[string]bool {
	view := map[string]bool{}
	if !u.Full {
		for c := range s.view {
			view[c] = true
		}
	}
	for _, c := range u.Clusters {
		if c.Removed {
			delete(view, c.Name)
		} else {
			view[c.Name] = true
		}
	}
	return view
}

func (s *Session) send(u Update, gen uint64) error {
	req := func(m *translatorv1.TranslateRequest) error { return s.stream.Send(m) }
	if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: gen, Full: u.Full, Scoped: u.Scoped, Targets: u.Targets}}}); err != nil {
		return err
	}
	for _, c := range u.Clusters {
		for i, part := range meta.Split(c.Upserts, snapshot.Resource.Size, protocol.PartBytes) {
			in := &translatorv1.ClusterInput{Cluster: c.Name, Removed: c.Removed, Stale: c.Stale, Meshes: c.Meshes, Labels: c.Labels, Upserts: resourcesToProto(part)}
			if i == 0 {
				in.Deletes = idsToProto(c.Deletes)
			}
			if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: in}}); err != nil {
				return err
			}
		}
	}
	if len(u.PolicyUpserts)+len(u.PolicyDeletes) > 0 {
		for i, part := range meta.Split(u.PolicyUpserts, snapshot.Resource.Size, protocol.PartBytes) {
			pc := &translatorv1.PolicyChange{Upserts: resourcesToProto(part)}
			if i == 0 {
				pc.Deletes = idsToProto(u.PolicyDeletes)
			}
			if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: pc}}); err != nil {
				return err
			}
		}
	}
	return req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: gen}}})
}

// resourcesToProto converts a part of resources to their wire form.
func resourcesToProto(rs []snapshot.Resource) []*snapshotv1.Resource {
	out := make([]*snapshotv1.Resource, len(rs))
	for i, r := range rs {
		out[i] = snapshot.ResourceToProto(r)
	}
	return out
}

func idsToProto(ids []snapshot.ID) []*snapshotv1.ResourceID {
	out := make([]*snapshotv1.ResourceID, len(ids))
	for i, id := range ids {
		out[i] = snapshot.IDToProto(id)
	}
	return out
}

// Describe asks a plugin what it is, and refuses an answer without a name
// or backends, or with a declaration CheckDeclaration refuses.
func Describe(ctx context.Context, client translatorv1.TranslatorClient) (*translatorv1.DescribeResponse, error) {
	d, err := client.Describe(ctx, &translatorv1.DescribeRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	if d.GetName() == "" || len(d.GetBackends()) == 0 {
		return nil, fmt.Errorf("describe: %w: the plugin gave no name or no backends", ErrProtocol)
	}
	if err := protocol.CheckDeclaration(d.GetBackends(), d.GetMeshes(), d.GetInputKinds(), d.GetOutputKinds()); err != nil {
		return nil, fmt.Errorf("describe: %w: plugin %q declares %w", ErrProtocol, d.GetName(), err)
	}
	return d, nil
}
