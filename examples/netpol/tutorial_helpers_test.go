package main

import "github.com/meshrelay/meshrelay/core/pki"

func pkiToken() (string, error) { return pki.NewToken() }
func pkiHash(tok string) []byte { return pki.HashToken(tok) }
