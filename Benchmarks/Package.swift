// swift-tools-version: 6.2
import PackageDescription

/// Haul's benchmarks, apart from the package users build: micro-benchmarks of the library's public API
/// (`swift package benchmark`), the HTTP floor tool, and the scripts under `peers/` that time `haul` against curl,
/// wget2 and aria2c. See docs/performance.md.
let package = Package(
    name: "HaulBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "Haul", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        .executableTarget(
            name: "TransferManagerBenchmarks",
            dependencies: [
                .product(name: "Haul", package: "Haul"),
                .product(name: "HaulTesting", package: "Haul"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/TransferManagerBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // AsyncHTTPClient and SwiftNIO alone on a list of URLs: the floor under `haul get`.
        .executableTarget(
            name: "haul-http-floor",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Tools/HTTPFloor"
        ),
    ]
)
