module github.com/kcp-cache/kcp-cache/hack/perf/perfplot

go 1.26.0

require golang.org/x/image v0.48.0
