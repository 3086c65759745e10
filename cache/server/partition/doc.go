// Package partition is the storage half of the cache's partitioning: it
// stores every object under a key that includes its shard and logical
// cluster, keeps the upstream watch cache working on those keys, and turns
// wildcard scopes into key prefixes plus field filters.
//
// It relies on two upstream seams and nothing else:
//   - generic.RESTOptionsGetter, which every registry Store (the CRD registry
//     and each type the data plane serves) asks for its storage decorator, and
//   - generic.StorageDecorator, through which we build the same stack as
//     registry.StorageWithCacher (raw etcd3 storage, cacher, cache delegator)
//     with our own key function, attribute function and indexes, and wrap it
//     in a storage.Interface that reads the scope from the request context.
//
// Requests are stamped with their partition before storage, in admission
// (Admission), so that a dry run, which never reaches storage, is refused
// and answered as the real request; storage stamps again for writes that
// come another way.
//
// The raw storage the watch cache fills itself from also releases the watch
// cache's history after a mass deletion followed by quiet (HistoryTrim),
// which upstream keeps until newer events displace it.
//
// The key layout is <resource-prefix>/<shard>/<cluster>/[<namespace>/]<name>
// below the etcd prefix, computed by one function (objectKey) for both the
// request path and the watch cache, which must agree exactly.
//
// One read goes around upstream's etcd storage: the union of a resource's
// identities ("<resource-prefix>:<identity>", sibling prefixes that no
// "<prefix>/" covers) is listed and watched with the etcd client itself,
// read-only, without a watch cache (NewUnionDecorator).
//
// Built with the tag kcp against kcp's Kubernetes fork, two file pairs
// differ: keyfuncs_*.go (the decorator's and the watch cache's key function
// types, and the fork's custom resource prefix) and storagecontext_*.go (the
// shard and cluster the fork's registry, etcd3 store and cacher read from
// the context).
package partition
