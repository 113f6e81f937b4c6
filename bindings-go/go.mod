module github.com/ferrolock/ferrolock/bindings-go

go 1.22
