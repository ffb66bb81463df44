// swift-tools-version: 6.2
import PackageDescription

/// SwiftNIO's modules for code that runs its own HTTP server or client on event loops.
let nioOnEventLoops: [Target.Dependency] = [
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
    .product(name: "NIOHTTP1", package: "swift-nio"),
    .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
]

/// The library `Haul`, the command `haul`, and `HaulTesting` (the servers the tests and the benchmarks run against).
/// Benchmarks live in a package of their own, `Benchmarks/`.
let package = Package(
    name: "Haul",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17), .watchOS(.v10)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .executable(name: "haul", targets: ["HaulCommand"]),
        .library(name: "HaulTesting", targets: ["HaulTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // AsyncHTTPClient's TLS, named for the https options (trusted certificates, verification) and the test server.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // AsyncHTTPClient's own dependency, named to turn its request spans off.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        // C functions Swift cannot reach: an atomic no-replace rename, the terminal's width (ioctl is variadic) and
        // SQLite's setting that keeps the write-ahead log on close (sqlite3_db_config is variadic).
        .target(name: "CHaulSystem", linkerSettings: [.linkedLibrary("sqlite3")]),
        // A keep-alive HTTP/1.1 client on SwiftNIO alone, for plain-http downloads.
        .target(name: "HaulHTTP1", dependencies: nioOnEventLoops),
        .target(
            name: "Haul",
            dependencies: [
                "CHaulSystem", "HaulHTTP1",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .executableTarget(
            name: "HaulCommand",
            dependencies: [
                "Haul", "CHaulSystem",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            // Release builds on Linux only; packages that use the library never see these flags.
            swiftSettings: [
                // Links Swift's runtime, Foundation and Dispatch statically: no dynamic symbol resolution at start.
                .unsafeFlags(["-static-stdlib"], .when(platforms: [.linux], configuration: .release))
            ],
            linkerSettings: [
                .unsafeFlags(
                    [
                        // The static runtime, as above.
                        "-static-stdlib",
                        // lld, which supports the packed relocations below.
                        "-use-ld=lld",
                        // Keeps the command's own symbols out of the dynamic table the runtime scans at start.
                        "-Xlinker", "--no-export-dynamic",
                        // Packed relative relocations: a far smaller table for the loader to read at start.
                        "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                    ],
                    .when(platforms: [.linux], configuration: .release)
                )
            ]
        ),
        .target(
            name: "HaulTesting",
            dependencies: nioOnEventLoops + [.product(name: "NIOSSL", package: "swift-nio-ssl")]
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulHTTP1", "HaulTesting", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            // A state database written by an earlier release, which the store must still open and migrate.
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "HaulHTTP1Tests",
            dependencies: ["HaulHTTP1", "HaulTesting"] + nioOnEventLoops
        ),
        .testTarget(
            name: "HaulIntegrationTests",
            dependencies: [
                "Haul", "HaulTesting", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HaulCommandTests",
            dependencies: [
                "Haul", "HaulCommand", "HaulTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ]
)
