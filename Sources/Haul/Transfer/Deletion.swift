import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// The driver of one deletion attempt: `DELETE` the URL and judge the answer.
///
/// The lifecycle (queue, retries, pause, cancel) is the shared ``Download/StateMachine``.
enum Deletion {
    /// The statuses that mean the file was deleted (or its deletion accepted).
    static let successStatuses: Set<Int> = [200, 202, 204]

    /// Runs one attempt to completion, failure or stop; never throws.
    static func run(
        _ plan: Download.Plan,
        _ deletion: TransferRequest.Deletion,
        transport: HTTPTransport,
        observer: some Download.Observer
    ) async -> Download.AttemptOutcome {
        await Download.outcome {
            observer.attemptStarted(plan.id, offset: 0)
            let (url, headers) = await plan.preparedRequest()
            let response = try await transport.send(.DELETE, url, headers: headers, body: nil)
            let status = Int(response.status.code)
            let answer = await HTTPTransport.drain(response)
            let succeeded =
                self.successStatuses.contains(status) || (status == 404 && deletion.treatsNotFoundAsSuccess)
            guard succeeded else {
                if status == 404 {
                    throw HaulError(.notFound, "Not found: the server has no file at this URL", httpStatus: 404)
                }
                throw HTTPTransport.statusError(response, body: answer)
            }
            try plan.checkStatusHook(status)
            return .completed(CompletedFile(path: plan.url, byteCount: 0, sha256: nil, modificationTime: nil))
        }
    }
}
