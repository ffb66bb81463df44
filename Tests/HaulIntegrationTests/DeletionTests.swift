import Foundation
import Haul
import HaulTesting
import Testing

@Suite("Deleting batches of remote files", .timeLimit(.minutes(2)))
struct DeletionTests {
    @Test func everyFileIsDeletedAndEachMissingOneFailsAsNotFound() async throws {
        try await FaultInjectingServer.withServer { server in
            for index in 0..<10 { server.setUpload([UInt8(index)], at: "/d\(index)") }
            let urls = (0..<10).map { server.url("/d\($0)") } + (0..<3).map { server.url("/gone\($0)") }
            let report = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 3)) {
                try await $0.enqueue(urls.map { .delete($0) }).report()
            }
            #expect(report.completed.count == 10)
            #expect(report.failed.map(\.item.url) == Array(urls.suffix(3)))
            #expect(report.failed.allSatisfy { $0.error.code == .notFound && $0.error.httpStatus == 404 })
            #expect(report.failed.allSatisfy { $0.item.attempts == 1 }, "a 404 is not retried")
            #expect(server.uploads.isEmpty)
            #expect(server.requests.allSatisfy { $0.method == "DELETE" })
            #expect(server.maximumConcurrentRequests <= 3)
        }
    }

    @Test func notFoundCountsAsSuccessWhenAsked() async throws {
        try await FaultInjectingServer.withServer { server in
            let report = try await TransferManager.withTransferManager(configuration: .testing()) {
                try await $0.enqueue(.delete(server.url("/never"), treatsNotFoundAsSuccess: true)).report()
            }
            #expect(report.isSuccess)
        }
    }

    @Test func transientFailuresAreRetriedAndPermanentOnesAreNot() async throws {
        try await FaultInjectingServer.withServer { server in
            server.setUpload([1], at: "/busy")
            server.setUpload([2], at: "/locked")
            server.setUploadFaults([.retryAfter(status: 503, value: "0"), .status(500)], at: "/busy")
            server.setUploadFaults([.status(423)], at: "/locked")
            var configuration = TransferManager.Configuration.testing()
            configuration.retryPolicy.baseDelay = .milliseconds(10)
            let report = try await TransferManager.withTransferManager(configuration: configuration) {
                try await $0.enqueue([
                    .delete(server.url("/busy"), id: "busy"), .delete(server.url("/locked"), id: "locked"),
                ])
                .report()
            }
            #expect(report.completed.map(\.item.id) == ["busy"])
            #expect(report.items[0].attempts == 3)
            #expect(report.errors["locked"]?.httpStatus == 423)
            #expect(report.errors["locked"]?.message.contains("423") == true)
            #expect(server.uploads.keys.sorted() == ["/locked"])
        }
    }
}
