// Package opaque is the cache's in-memory representation of a schema-less
// object: its metadata parsed, everything else kept as the JSON bytes that
// were stored.
//
// The cache never looks inside a cached object beyond its metadata: copies
// were validated on their shard, and the cache must not prune or reject what a
// newer shard sends. Upstream's unstructured representation decodes every
// object into nested maps (about four times its JSON size), deep-copies them
// on the way out and walks them again to encode. Here:
//
//   - the watch cache holds the stored bytes plus parsed metadata;
//   - copies (DeepCopyObject) share the bytes, which are never modified;
//   - encoding an object, or a list of them, writes the stored bytes with
//     apiVersion, kind and resourceVersion spliced in, without walking them.
//
// Object implements metav1.Object itself: an object read from storage holds
// only the metadata fields read on every object, and every setter drops the
// metadata bytes kept from decoding as soon as the metadata changes; objects
// read from storage and never modified take the fast path.
//
// Codec is the storage codec and Serializer the negotiated serializer of one
// served type; both speak JSON (the cache, like apiextensions, serves no
// protobuf). With WithCBOR, Serializer also answers in CBOR, transcoding the
// JSON it writes in one pass (cbor.go); storage stays JSON.
package opaque
