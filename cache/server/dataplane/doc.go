// Package dataplane serves the cache's objects: one registry Store per
// declared type, on the partitioned storage of package partition, with the
// objects of package opaque, through upstream's request handlers
// (k8s.io/apiserver/pkg/endpoints/handlers).
//
// Types are declared, not compiled in. A CRD is the usual declaration
// (CRDSource turns every Established CRD into a Resource), but anything may
// register a Resource at run time; the set changes without a restart.
// apiextensions-apiserver keeps serving the CRD API, discovery and OpenAPI;
// requests for the declared types never reach its custom-resource handler.
// What that buys over the custom-resource handler:
//
//   - names: types may accept path-segment names (kcp's RBAC copies, such as
//     "system:kcp:apiexport:tenancy:bind"), declared per type;
//   - versions without conversion: every served version of a type reads and
//     writes the same stored objects, answered under the requested version;
//   - no decoding of cached objects into maps, no deep copy per listed object,
//     list encoding that copies bytes (see package opaque);
//   - readiness per type: until a type's storage serves, its requests get 503
//     with Retry-After and a Status body, never a 404;
//   - no two-second stall of creates after a CRD is Established.
//
// Since upstream's installer never sees these requests, WithRequestMetrics
// records them in upstream's request metrics itself.
package dataplane
