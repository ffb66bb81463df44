import Crypto
import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Naming files and resolving conflicts", .timeLimit(.minutes(1)))
struct NamingTests {
    static let body = FaultInjectingServer.body(size: 1_000, seed: 5)

    func download(
        _ paths: [String],
        resources: [String: FaultInjectingServer.Resource]? = nil,
        naming: NamingPolicy = .urlPath,
        conflict: ConflictPolicy = .rename,
        into folder: URL,
        check: ((FaultInjectingServer, BatchReport) throws -> Void)? = nil
    ) async throws -> BatchReport {
        let resources =
            resources
            ?? Dictionary(uniqueKeysWithValues: paths.map { ($0, FaultInjectingServer.Resource(body: Self.body)) })
        return try await FaultInjectingServer.withServer(resources: resources) { server in
            var configuration = TransferManager.Configuration.testing()
            configuration.naming = naming
            configuration.conflictPolicy = conflict
            let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                try await manager.download(paths.map { server.url($0) }, into: folder)
            }
            try check?(server, report)
            return report
        }
    }

    @Test func namesAFileAfterThePercentDecodedLastPathComponent() async throws {
        try await withTemporaryDirectory { folder in
            let report = try await self.download(["/dir/hello%20world.txt", "/a%2Fb.txt", "/dir/"], into: folder)
            #expect(report.completed.count == 3)
            #expect(names(in: folder) == ["a_b.txt", "hello world.txt", "index.html"])
        }
    }

    @Test func takesASanitisedNameFromContentDispositionWhenAsked() async throws {
        try await withTemporaryDirectory { folder in
            let resources: [String: FaultInjectingServer.Resource] = [
                "/1": .init(body: Self.body, contentDisposition: "attachment; filename=\"../../evil.sh\""),
                "/2": .init(
                    body: Self.body,
                    contentDisposition: "attachment; filename=\"x.txt\"; filename*=UTF-8''na%C3%AFve.txt"
                ),
                "/3": .init(body: Self.body, contentDisposition: "attachment; filename=\"/etc/passwd\""),
                "/4": .init(body: Self.body),
            ]
            let report = try await self.download(
                ["/1", "/2", "/3", "/4"],
                resources: resources,
                naming: .contentDisposition,
                into: folder
            )
            #expect(report.completed.count == 4)
            #expect(names(in: folder) == ["4", "evil.sh", "naïve.txt", "passwd"])
            #expect(
                !FileManager.default.fileExists(
                    atPath: folder.deletingLastPathComponent().appending(path: "evil.sh").path
                )
            )
        }
    }

    @Test func prefixesAUUIDWhenAsked() async throws {
        try await withTemporaryDirectory { folder in
            _ = try await self.download(["/photo.jpg"], naming: .uuidPrefix, into: folder)
            let name = try #require(names(in: folder).first)
            #expect(name.hasSuffix("-photo.jpg"))
            #expect(UUID(uuidString: String(name.prefix(36))) != nil)
        }
    }

    @Test func namesAFileAfterTheHashOfItsURLWhenAsked() async throws {
        try await withTemporaryDirectory { folder in
            _ = try await self.download(["/photo.jpg"], naming: .urlHash, into: folder) { server, _ in
                let digest = SHA256.hash(data: Array(server.url("/photo.jpg").absoluteString.utf8))
                let hex = digest.map { String(format: "%02x", $0) }.joined()
                #expect(names(in: folder) == [hex + ".jpg"])
            }
        }
    }

    @Test func placesAFileWhereAClosureSaysButNeverOutsideTheFolder() async throws {
        try await withTemporaryDirectory { folder in
            let naming = NamingPolicy.custom { _, url in
                url.lastPathComponent == "a.jpg" ? "albums/2024/a.jpg" : "../../outside/b.jpg"
            }
            let report = try await self.download(["/a.jpg", "/b.jpg"], naming: naming, into: folder)
            #expect(report.completed.count == 2)
            #expect(contents(of: folder.appending(path: "albums/2024/a.jpg")) == Self.body)
            #expect(contents(of: folder.appending(path: "outside/b.jpg")) == Self.body)
            #expect(
                !FileManager.default.fileExists(
                    atPath: folder.deletingLastPathComponent().appending(path: "outside").path
                )
            )
        }
    }

    @Test func renamesToNameDotNumberDotExtensionWhenTheFileExists() async throws {
        try await withTemporaryDirectory { folder in
            try Data("old".utf8).write(to: folder.appending(path: "a.txt"))
            try Data("old".utf8).write(to: folder.appending(path: "a.1.txt"))
            let report = try await self.download(["/a.txt"], into: folder)
            #expect(report.completed.first?.file.path.lastPathComponent == "a.2.txt")
            #expect(contents(of: folder.appending(path: "a.txt")) == Array("old".utf8))
            #expect(contents(of: folder.appending(path: "a.2.txt")) == Self.body)
        }
    }

    @Test func overwritesTheExistingFileWhenAsked() async throws {
        try await withTemporaryDirectory { folder in
            try Data("old".utf8).write(to: folder.appending(path: "a.txt"))
            let report = try await self.download(["/a.txt"], conflict: .overwrite, into: folder)
            #expect(report.completed.count == 1)
            #expect(names(in: folder) == ["a.txt"])
            #expect(contents(of: folder.appending(path: "a.txt")) == Self.body)
        }
    }

    @Test func skipsWithoutARequestWhenTheFileExistsAndThePolicyIsSkip() async throws {
        try await withTemporaryDirectory { folder in
            try Data("old".utf8).write(to: folder.appending(path: "a.txt"))
            _ = try await self.download(["/a.txt", "/b.txt"], conflict: .skip, into: folder) { server, report in
                #expect(report.skipped.count == 1)
                #expect(report.completed.count == 1)
                #expect(report.isSuccess)
                #expect(server.requests.map(\.path) == ["/b.txt"])
            }
            #expect(contents(of: folder.appending(path: "a.txt")) == Array("old".utf8))
        }
    }

    @Test func failsWithoutARequestWhenTheFileExistsAndThePolicyIsFail() async throws {
        try await withTemporaryDirectory { folder in
            try Data("old".utf8).write(to: folder.appending(path: "a.txt"))
            _ = try await self.download(["/a.txt"], conflict: .fail, into: folder) { server, report in
                #expect(report.failed.first?.error.code == .fileExists)
                #expect(server.requests.isEmpty)
            }
            #expect(names(in: folder) == ["a.txt"])
        }
    }

    @Test func twoURLsWithTheSameNameBothLandUnderTheRenamePolicy() async throws {
        try await withTemporaryDirectory { folder in
            let report = try await self.download(["/x/same.bin", "/y/same.bin"], into: folder)
            #expect(report.completed.count == 2)
            #expect(names(in: folder) == ["same.1.bin", "same.bin"])
        }
    }
}
