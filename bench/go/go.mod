module github.com/ferrolock/ferrolock/bench/go

go 1.22

require github.com/ferrolock/ferrolock/bindings-go v0.0.0

replace github.com/ferrolock/ferrolock/bindings-go => ../../bindings-go
