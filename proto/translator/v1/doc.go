// Package translatorv1 is the generated Go code of proto/translator/v1, the
// session protocol between the server and translator plugins. Plugin
// authors never see it: the sdk package hides it. Regenerate with
// `make generate`.
package translatorv1
