import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// An event stream's continuation that may hold events for a moment, so that they reach the stream's reader in bursts
/// (see ``TransferManager/Configuration/eventDeliveryInterval``).
///
/// An event yielded to a stream whose reader is waiting resumes the reader: a job for another thread, which the
/// kernel has to wake when it sleeps. Events held and yielded together wake the reader once. Lives in the manager's
/// state, under its lock, so held events keep their order with those yielded at once. The continuation is held
/// behind a reference (``Box``), so that an outlet has a layout known at compile time.
struct EventOutlet<Element: Sendable>: Sendable {
    private let box: Box
    /// Whether events are held until a release (a manager with an ``EventDeliveryClock``), or yielded as they come.
    let holds: Bool
    private var held: [Element] = []
    /// Where the held event that a newer one supersedes is (a batch's progress: only the latest counts).
    private var supersededIndex: Int?

    private final class Box: Sendable {
        let continuation: AsyncStream<Element>.Continuation
        init(_ continuation: AsyncStream<Element>.Continuation) { self.continuation = continuation }
    }

    init(_ continuation: AsyncStream<Element>.Continuation, holds: Bool) {
        self.box = Box(continuation)
        self.holds = holds
    }

    /// The stream's continuation.
    var continuation: AsyncStream<Element>.Continuation { self.box.continuation }

    /// Yields `element`, or holds it when the outlet ``holds``; returns whether it is the first event held (the caller
    /// then makes sure a delivery is due).
    ///
    /// An event that `supersedes` takes the place of the one held before it that did (which is dropped): the stream
    /// gets the latest snapshot once, after the events that came before it.
    mutating func send(_ element: Element, supersedes: Bool = false) -> Bool {
        guard self.holds else {
            self.continuation.yield(element)
            return false
        }
        let isFirst = self.held.isEmpty
        if supersedes {
            if let index = self.supersededIndex { self.held.remove(at: index) }
            self.supersededIndex = self.held.count
        }
        self.held.append(element)
        return isFirst
    }

    /// Yields the events held, in order.
    mutating func release() {
        guard !self.held.isEmpty else { return }
        for element in self.held { self.continuation.yield(element) }
        self.held.removeAll(keepingCapacity: true)
        self.supersededIndex = nil
    }
}

/// Schedules the release of held events on an event loop: the manager's state asks for one release when it holds its
/// first event, and the release (``connect(_:)``) takes the manager's lock.
final class EventDeliveryClock: Sendable {
    let interval: TimeAmount
    private let group: any EventLoopGroup
    private let release = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)

    init(interval: Duration, group: any EventLoopGroup) {
        self.interval = .nanoseconds(interval.nanoseconds)
        self.group = group
    }

    /// Sets what a release does; until then a release does nothing.
    func connect(_ release: @escaping @Sendable () -> Void) {
        self.release.withLockedValue { $0 = release }
    }

    /// Releases the held events ``interval`` from now, on the calling thread's event loop when it runs one (no
    /// wake-up of another thread), else on the group's next.
    func schedule() {
        let release = self.release.withLockedValue { $0 }
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? self.group.any()
        loop.scheduleTask(in: self.interval) { release?() }
    }
}
