// Command meshrelay is the meshrelay control plane: the management server,
// the relay agent, and the commands that operate them.
//
// Exit codes: 0 success; 1 the command failed; 2 the command line was wrong;
// 3 the command ran and found a problem it reports (a failed plugin
// verification, a policy that is not accepted with --check).
package main
