// Package discovery keeps the unaggregated /apis group list in step with
// the Established CRDs. apiextensions leaves that list to kube-apiserver's
// aggregator, which a cache server does not have in front of it. Built with
// the tag kcp, it also feeds aggregated discovery (aggregated_kcp.go): kcp's
// fork of apiextensions has no discovery controller.
package discovery
