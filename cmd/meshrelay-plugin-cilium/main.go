package main

import (
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/sdk"
)

func main() { sdk.Serve(cilium.New()) }
