// Command misuse reads shared values against their handles' types; it
// must not compile.
package main

import "github.com/meshrelay/meshrelay/sdk"

var (
	domains = sdk.NewShared("domains", func(f *sdk.Fleet) []string { return nil })
	perKey  = sdk.NewSharedMap("per-service", func(f *sdk.Fleet, k sdk.ServiceKey) int { return 0 })
)

func read(f *sdk.Fleet) {
	var n int = domains.Get(f)                     // the value is a []string
	var s string = perKey.Get(f, sdk.ServiceKey{}) // the value is an int
	_ = perKey.Get(f, "east/shop/api")             // the key is a ServiceKey
	_, _ = n, s
}

func main() { _ = read }
