package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries an exit code with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// problem returns an error that exits with code 3.
func problem(format string, args ...any) error {
	return &exitError{code: 3, err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	if !errors.Is(err, errDiffers) {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode returns the exit code of a command that failed with err.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case isUsageError(err):
		return 2
	default:
		return 1
	}
}

func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// logOptions configure the logger every command shares.
type logOptions struct {
	format string
	level  string
}

func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--log-level: %w", err)}
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch o.format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	}
	return nil, &exitError{code: 2, err: fmt.Errorf("--log-format must be json or text, not %q", o.format)}
}

func newRootCommand() *cobra.Command {
	logs := &logOptions{format: "json", level: "info"}
	root := &cobra.Command{
		Use:   "meshrelay",
		Short: "One control plane for Istio, Envoy and Cilium across many Kubernetes clusters",
		Long: `meshrelay gives platform teams one place to say what they want — traffic,
access, global services — and makes every cluster do it.

A management server keeps the fleet's state; one relay agent per workload
cluster discovers what runs there, and applies what translator plugins
(Istio, Envoy, Cilium, or your own) compute from the policies.`,
		Example: `  # See it work on one machine, with nothing installed:
  meshrelay demo

  # Run a server and register a cluster:
  meshrelay server --store redis://redis:6379/0 --plugin-dir /plugins --config-source kube
  meshrelay cluster register east > east.token

  # See the fleet:
  meshrelay get destinations -n bookinfo
  meshrelay describe policy reviews-split`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.PersistentFlags().StringVar(&logs.format, "log-format", logs.format, "log format: json or text")
	root.PersistentFlags().StringVar(&logs.level, "log-level", logs.level, "log level: debug, info, warn or error")
	root.AddCommand(
		newServerCommand(logs),
		newAgentCommand(logs),
		newClusterCommand(),
		newStatusCommand(),
		newGetCommand(),
		newDescribeCommand(),
		newPluginCommand(logs),
		newTranslateCommand(logs),
		newDiffCommand(logs),
		newRolloutCommand(),
		newDemoCommand(logs),
		newBenchCommand(logs),
	)
	root.AddCommand(newTopCommand())
	return root
}
