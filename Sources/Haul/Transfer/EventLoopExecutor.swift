import NIOCore

/// Runs the jobs of the tasks that prefer it on a SwiftNIO event loop: each transfer's task runs on one of the HTTP
/// client's loops, beside its connection (``TransferManager``). The client completes a response's head and end on
/// the connection's loop; there the task's resumption is a job queued on the same thread, not a wake-up of another.
///
/// What a transfer does between its awaits (opening and renaming its file, writing what arrived, hashing, the
/// caller's hooks) runs on the loop, between the loop's other I/O, as in single-threaded downloaders.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
final class EventLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
