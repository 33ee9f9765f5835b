package protocol

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os/exec"

	"github.com/hashicorp/go-plugin"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Handshake cookie. go-plugin refuses to start a binary that does not see
// this variable, so a plugin run by hand says it is a plugin and exits.
const (
	MagicCookieKey   = "MESHRELAY_PLUGIN"
	MagicCookieValue = "2b7c6f0e-meshrelay-translator"
)

// V1 is the first translator protocol version: proto/translator/v1.
const V1 = 1

// PluginName is the name of the translator plugin inside a plugin set.
const PluginName = "translator"

// MaxMessageBytes is the largest gRPC message either side accepts. Senders
// split outputs and inputs into parts of about [PartBytes], so this limit is
// only met by a message that is broken.
const MaxMessageBytes = 64 << 20

// PartBytes is the size senders aim for when they split a logical message
// into parts.
const PartBytes = 1 << 20

// MaxSameBodies is how many of the resources one answer sends a plugin may
// name again for other clusters (ClusterOutput.same): the first so many
// sent. Each side holds a reference to or a digest of each for the length
// of the answer.
const MaxSameBodies = 1 << 16

// Supported returns the protocol versions this build speaks, lowest first.
func Supported() []int { return []int{V1} }

// Handshake returns the go-plugin handshake. Its ProtocolVersion is the
// default for peers that do not negotiate.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{ProtocolVersion: V1, MagicCookieKey: MagicCookieKey, MagicCookieValue: MagicCookieValue}
}

// ServerPlugins returns the plugin sets a plugin serves, one per protocol
// version, each carrying srv.
func ServerPlugins(srv translatorv1.TranslatorServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		V1: {PluginName: &GRPCPlugin{Impl: srv}},
	}
}

// ClientPlugins returns the plugin sets a host accepts, one per protocol
// version. Dispensing the translator plugin gives a [Client].
func ClientPlugins() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		V1: {PluginName: &GRPCPlugin{}},
	}
}

// ServerOptions returns the gRPC server options both the plugin process and
// the in-process server use.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes)}
}

// DialOptions returns the gRPC dial options of the host's side.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))}
}

// Client is what the host gets from a dispensed plugin: the translator
// client of the negotiated version and the connection under it.
type Client struct {
	Version    int
	Translator translatorv1.TranslatorClient
	Conn       *grpc.ClientConn
}

// GRPCPlugin is the go-plugin glue of protocol version 1. Impl is set on
// the plugin's side only.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl translatorv1.TranslatorServer
}

// GRPCServer registers the translator service.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("translator plugin has no server")
	}
	translatorv1.RegisterTranslatorServer(s, p.Impl)
	return nil
}

// GRPCClient returns a *Client for the connection.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &Client{Version: V1, Translator: translatorv1.NewTranslatorClient(conn), Conn: conn}, nil
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// ServeInMemory serves srv over an in-memory gRPC connection with the
// options a plugin process uses, and returns the host's end of it. stop
// closes the connection and the server. name appears in errors.
func ServeInMemory(name string, srv translatorv1.TranslatorServer) (conn *grpc.ClientConn, stop func(), err error) {
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(ServerOptions()...)
	translatorv1.RegisterTranslatorServer(s, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(lis)
	}()
	opts := append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, DialOptions()...)
	conn, err = grpc.NewClient("passthrough:///meshrelay-in-process", opts...)
	if err != nil {
		s.Stop()
		<-served
		return nil, nil, fmt.Errorf("serve %q in process: %w", name, err)
	}
	return conn, func() {
		_ = conn.Close()
		s.Stop()
		<-served
	}, nil
}

// ClientConfig returns the go-plugin client configuration a host starts a
// plugin binary with: cmd runs it, and its file must hash to sum
// (SHA-256); only gRPC, automatic mTLS, the versioned plugin sets and the
// raised message limits. The caller adds timeouts, logging and output.
func ClientConfig(cmd *exec.Cmd, sum []byte) *plugin.ClientConfig {
	return &plugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: ClientPlugins(),
		Cmd:              cmd,
		SecureConfig:     &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		GRPCDialOptions:  DialOptions(),
	}
}
