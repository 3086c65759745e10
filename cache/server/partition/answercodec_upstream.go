//go:build !kcp

package partition

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// This file is the upstream build; answercodec_kcp.go is kcp's. Upstream's
// registry keeps the partition annotations admission stamped on a created
// CRD, so a dry run's answer has them: the storage codec is upstream's.
func answerCodec(_ schema.GroupResource, codec runtime.Codec) runtime.Codec { return codec }
