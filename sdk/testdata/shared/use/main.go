// Command use reads shared values as their handles type them; it compiles.
package main

import "github.com/meshrelay/meshrelay/sdk"

var (
	domains = sdk.NewShared("domains", func(f *sdk.Fleet) []string { return nil })
	perKey  = sdk.NewSharedMap("per-service", func(f *sdk.Fleet, k sdk.ServiceKey) int { return 0 })
)

func read(f *sdk.Fleet) ([]string, int) {
	return domains.Get(f), perKey.Get(f, sdk.ServiceKey{Cluster: "east"})
}

func main() { _ = read }
