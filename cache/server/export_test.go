package server

// KillEmbeddedEtcd stops the server's embedded etcd at once, as a crash
// would, under the running server: for tests of what the server does when
// its etcd dies.
func KillEmbeddedEtcd(s *Server) { s.etcd.Kill() }
