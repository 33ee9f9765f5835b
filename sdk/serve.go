package sdk

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// LogLevelEnv names the environment variable that sets a plugin's log
// level (trace, debug, info, warn, error); the default is info.
const LogLevelEnv = "MESHRELAY_PLUGIN_LOG_LEVEL"

// parentPollInterval is how often a plugin checks that its host still runs.
const parentPollInterval = 500 * time.Millisecond

// Serve runs t as a meshrelay plugin and never returns; it is a plugin's
// whole main. It speaks the translator protocol over go-plugin, logs hclog
// JSON to stderr, and exits when the host that started it dies. Run by
// hand, without the host's handshake, it says it is a plugin and exits 1.
func Serve(t Translator) { serve(t) }

// ServeFleet is [Serve] for a [FleetTranslator].
func ServeFleet(t FleetTranslator) { serve(t) }

// describer is a Translator or a FleetTranslator.
type describer interface{ Describe() Description }

func serve(t describer) {
	level := hclog.LevelFromString(os.Getenv(LogLevelEnv))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	desc := t.Describe()
	logger := hclog.New(&hclog.LoggerOptions{Name: desc.Name, Level: level, Output: os.Stderr, JSONFormat: true})
	if err := validateDescription(desc); err != nil {
		logger.Error("cannot serve", "error", err)
		os.Exit(1)
	}
	if os.Getenv(protocol.MagicCookieKey) == protocol.MagicCookieValue {
		go watchParent(os.Getppid(), parentPollInterval, func() {
			logger.Warn("host process is gone, exiting")
			os.Exit(0)
		})
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  protocol.Handshake(),
		VersionedPlugins: protocol.ServerPlugins(&server{t: t, desc: desc, ownProcess: true}),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, protocol.ServerOptions()...)...)
		},
		Logger: logger,
	})
	os.Exit(0)
}

// watchParent calls orphaned once the process's parent is no longer ppid:
// when the host dies, the plugin is handed to another parent.
func watchParent(ppid int, every time.Duration, orphaned func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for range tick.C {
		if os.Getppid() != ppid {
			orphaned()
			return
		}
	}
}

// ServeInProcess serves t over an in-memory gRPC connection with the same
// protocol a plugin process speaks, for hosts that link a translator in and
// for tests. stop closes the connection and the server.
func ServeInProcess(t Translator) (conn *grpc.ClientConn, stop func(), err error) {
	return serveInProcess(t)
}

// ServeFleetInProcess is [ServeInProcess] for a [FleetTranslator].
func ServeFleetInProcess(t FleetTranslator) (conn *grpc.ClientConn, stop func(), err error) {
	return serveInProcess(t)
}

func serveInProcess(t describer) (conn *grpc.ClientConn, stop func(), err error) {
	desc := t.Describe()
	if err := validateDescription(desc); err != nil {
		return nil, nil, err
	}
	return protocol.ServeInMemory(desc.Name, newServer(t, desc))
}

// server implements the translator service for one translator.
type server struct {
	translatorv1.UnimplementedTranslatorServer
	t    describer
	desc Description
	// ownProcess is set when the translator has the process to itself
	// (Serve), so the server may return memory to the operating system.
	ownProcess bool
}

func newServer(t describer, desc Description) *server { return &server{t: t, desc: desc} }

// Describe returns the translator's description.
func (s *server) Describe(context.Context, *translatorv1.DescribeRequest) (*translatorv1.DescribeResponse, error) {
	return describeToProto(s.desc), nil
}

// Translate runs one session until the host closes its side.
func (s *server) Translate(stream translatorv1.Translator_TranslateServer) error {
	held, err := s.translate(stream)
	if s.ownProcess && held {
		// The session's whole view is garbage now: the host dropped a
		// revision (a staged rollout ended) or closes. Without this, a
		// plugin with little else to do keeps it until its next
		// collection, up to two minutes away, and its pages longer.
		debug.FreeOSMemory()
	}
	return err
}

// translate runs one session until the host closes its side, and reports
// whether the session held a view; the session is garbage once it returns.
func (s *server) translate(stream translatorv1.Translator_TranslateServer) (held bool, err error) {
	sess := newSession(s.t, s.desc)
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return held, nil
		}
		if err != nil {
			return held, err
		}
		held = true
		if err := sess.handle(ctx, req, stream.Send); err != nil {
			if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
				return held, err
			}
			return held, status.Error(codes.InvalidArgument, err.Error())
		}
		if s.ownProcess && req.GetCommit() != nil && sess.full {
			// A full update decodes and encodes every target, garbage
			// once sent, several times what the session keeps; without this,
			// the runtime hands the freed pages back to the operating
			// system only over minutes. Full updates are rare: a session's
			// start and its recovery from a failure.
			debug.FreeOSMemory()
		}
	}
}
