// Package meta is the vocabulary api, sdk, core and plugins share: the
// small types and helpers every layer speaks, such as [Split], which cuts a
// list into parts of a bounded byte size for messages on the wire.
//
// meta imports nothing of this module but proto/, so every package may
// import it.
package meta
